"""README.md and docs/ against the code, so the docs cannot drift from it.

- every `propme <command> --flag` written in the docs exists in that command's parser, and
  docs/cli.md lists every option of every command;
- the task metadata keys and `PROPME_*` variables the docs list are exactly those the code reads,
  found in the source of the lm-eval loader hook and everything it hands the metadata to;
- docs/cli.md's table of leaderboard columns is the code's (`report.columns.leaderboard_columns`);
- relative links and their anchors resolve, the Python snippets run, the version is one.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import json
import pkgutil
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

import propme
import propme_metrics
import propme_metrics.version
import propme_tasks
from propme.cli.app import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: metadata keys the docs list that lm-eval reads, not PropMe (a task's `metadata.version`)
READ_BY_LMEVAL = {"version"}


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _fences(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S)


def _prose(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def _tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table as rows of cells (header first, the separator row dropped)."""
    tables, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


# --- the command line ----------------------------------------------------------------------------

def _parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every (sub)command's parser by its path: () is `propme`, ("index", "build") its subcommand."""
    found = {}

    def walk(parser, path):
        found[path] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(build_parser(), ())
    return found


PARSERS = _parsers()


def _options(path: tuple[str, ...]) -> set[str]:
    return {o for a in PARSERS[path]._actions for o in a.option_strings if o.startswith("--")} - {"--help"}


def _command_lines() -> list[tuple[str, str]]:
    """(file, text) of every code block line (continuations joined) and inline code span."""
    lines = []
    for path in DOCS:
        text = _text(path)
        for _, body in _fences(text):
            lines += [(path.name, line) for line in body.replace("\\\n", " ").splitlines()]
        lines += [(path.name, span) for span in re.findall(r"`([^`\n]+)`", _prose(text))]
    return lines


def _invocations():
    """(file, command path, options) of every `propme ...` written in the docs."""
    for name, line in _command_lines():
        # the command starts the line or span, or a `$(...)`, `&&` or `;`: not `--tasks propme`
        for match in re.finditer(r"(?:^|\$\(|&& |; )\s*propme((?: [^|;&)#]*)?)", line.strip()):
            words = match.group(1).split()
            path: tuple[str, ...] = ()
            while words and (*path, words[0]) in PARSERS:
                path, words = (*path, words[0]), words[1:]
            flags = {re.match(r"--[a-z][a-z0-9-]*", w).group() for w in words if re.match(r"--[a-z]", w)} - {"--help"}
            yield name, path, flags


def test_docs_name_commands_and_options_that_exist():
    seen = list(_invocations())
    assert len(seen) > 30, "the docs' command lines were not found"
    wrong = [(name, "propme " + " ".join(path), sorted(flags - _options(path)))
             for name, path, flags in seen if flags - _options(path)]
    assert not wrong, f"options that the command does not have: {wrong}"
    leaves = {p for p, parser in PARSERS.items() if not any(isinstance(a, argparse._SubParsersAction)
                                                            for a in parser._actions)}
    assert leaves <= {path for _, path, _ in seen}, "a subcommand the docs never show"


def test_cli_reference_lists_every_option_of_every_command():
    text = _text(ROOT / "docs" / "cli.md")
    sections = re.split(r"^## (propme(?: [\w-]+)*)\n", text, flags=re.M)
    documented = {}
    for title, body in zip(sections[1::2], sections[2::2]):
        path = tuple(title.split()[1:])
        assert path in PARSERS, f"docs/cli.md has a section for a command that does not exist: {title}"
        cells = [row[0] for table in _tables(body) for row in table[1:]]
        documented[path] = {f for cell in cells for f in re.findall(r"`(--[a-z][a-z0-9-]*)", cell)} - {"--help"}
    for path, parser in PARSERS.items():
        if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions) and path:
            continue  # `propme index` and `propme prompts` only group their subcommands
        assert documented.get(path) == _options(path), f"propme {' '.join(path)}: docs/cli.md vs the parser"


def test_version_is_one_and_shown():
    out = subprocess.run([sys.executable, "-m", "propme.cli.app", "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"propme {propme_metrics.__version__}"
    assert "version = attr: propme_metrics.version.__version__" in _text(ROOT / "setup.cfg")
    assert propme_metrics.__version__ is propme_metrics.version.__version__
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", _text(ROOT / "CHANGELOG.md"), flags=re.M)
    version = Version(propme_metrics.__version__)
    # the newest release, or a development version after it (unreleased code whose results differ)
    assert releases and (str(version) == releases[0] or version.is_devrelease and version > Version(releases[0])), \
        "CHANGELOG.md's newest release"


def test_leaderboard_column_table_is_the_codes():
    """docs/cli.md's table of leaderboard columns is the one the report defines, row for row."""
    from propme_metrics.report.columns import leaderboard_columns

    text = _text(ROOT / "docs" / "cli.md")
    section = text[text.index("### Leaderboard columns"):]
    table = next(t for t in _tables(section) if t[0] == ["column", "meaning"])
    rows = [row for row in table[1:] if not set("".join(row)) <= set("-:| ")]  # the separator row
    assert rows == [[f"`{name}`", meaning] for name, meaning in leaderboard_columns()]


# --- what the code reads: metadata keys and environment variables -------------------------------

class _Reads:
    """The metadata keys and environment variables a function reads, from its source.

    Follows the metadata into every function it is handed to, with the string arguments of that
    call bound (`_corpus_option(meta, "n_prompts")` reads `n_prompts` and `PROPME_N_PROMPTS`). A key
    built from a value the code only knows at run time keeps that value's name as a placeholder:
    `f"{corpus}_index"` is `<corpus>_index`, as the docs write it.
    """

    def __init__(self):
        self.keys: set[str] = set()
        self.env: set[str] = set()
        self.unresolved: list[str] = []
        self._done: set = set()

    def follow(self, func, meta: str | None, bound: dict[str, str]) -> None:
        func = inspect.unwrap(func)  # a decorated loader (`hooks.handed_over`): its own code and globals
        key = (func, meta, tuple(sorted(bound.items())))
        if key in self._done:
            return
        self._done.add(key)
        node = ast.parse(textwrap.dedent(inspect.getsource(func))).body[0]
        scope = _Scope(node, func.__globals__, bound, loops=meta is not None)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                self._call(sub, scope, meta)
            elif isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Load):
                if meta and _is_name(sub.value, meta):
                    self._add(self.keys, sub.slice, scope)
                elif _is_environ(sub.value):
                    self._add(self.env, sub.slice, scope)

    def _add(self, into: set[str], expr: ast.expr, scope: _Scope) -> None:
        values = scope.values(expr)
        if not values:
            self.unresolved.append(ast.unparse(expr))
        into.update(values)

    def _call(self, call: ast.Call, scope: _Scope, meta: str | None) -> None:
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and call.args:
            if meta and _is_name(f.value, meta):
                return self._add(self.keys, call.args[0], scope)
            if _is_environ(f.value):
                return self._add(self.env, call.args[0], scope)
        if isinstance(f, ast.Attribute) and f.attr == "getenv" and _is_name(f.value, "os"):
            return self._add(self.env, call.args[0], scope)
        if _is_name(f, "env_switch") and call.args:  # core.switches.env_switch(NAME, default)
            return self._add(self.env, call.args[0], scope)
        if not meta or not any(_is_name(a, meta) for a in call.args):
            return
        callee = scope.resolve(f)
        if not (inspect.isfunction(callee) and callee.__module__.startswith(("propme.", "propme_metrics", "propme_tasks"))):
            return
        params = list(inspect.signature(callee).parameters)
        target, choices = None, {}
        for name, arg in zip(params, call.args):
            if _is_name(arg, meta):
                target = name
            else:
                choices[name] = [v for v in scope.values(arg) if isinstance(v, str)] or [None]
        for combo in itertools.product(*choices.values()):
            bound = {k: v for k, v in zip(choices, combo) if v is not None}
            self.follow(callee, target, bound)


class _Scope:
    """The values a name can hold inside one function: bound arguments, loop variables over
    constants (with `loops`), local assignments and imports, the module's globals; else a
    `<name>` placeholder."""

    def __init__(self, func: ast.AST, globals_: dict, bound: dict[str, str], loops: bool = True):
        self.globals = dict(globals_)
        self.names: dict[str, list] = {}
        args = func.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None:
                self.names[a.arg] = [bound.get(a.arg, f"<{a.arg}>")]
        self._assigned: dict[str, list[ast.expr]] = {}
        for sub in ast.walk(func):
            if isinstance(sub, (ast.For, ast.comprehension)) and isinstance(sub.target, ast.Name):
                try:  # only where the metadata is followed: loops over the keys it names, e.g. TOKENIZER_KEYS
                    if not loops:
                        raise LookupError
                    self.names[sub.target.id] = list(itertools.islice(self._eval(sub.iter, {}), 1000))
                except Exception:
                    self.names[sub.target.id] = [f"<{sub.target.id}>"]
            elif isinstance(sub, ast.Assign):
                for t in sub.targets:
                    for name in ast.walk(t):
                        if isinstance(name, ast.Name):
                            value = sub.value if isinstance(t, ast.Name) else None
                            self._assigned.setdefault(name.id, []).append(value)
            elif isinstance(sub, ast.ImportFrom) and sub.module:
                module = __import__(sub.module, fromlist=[a.name for a in sub.names])
                for a in sub.names:
                    self.globals[a.asname or a.name] = getattr(module, a.name, None)

    def _eval(self, expr: ast.expr, env: dict):
        return eval(compile(ast.Expression(expr), "<docs test>", "eval"), {**self.globals, **env})

    def lookup(self, name: str) -> list:
        if name not in self.names and name in self._assigned:
            self.names[name] = [f"<{name}>"]  # while resolving: a cycle falls back to the placeholder
            values = [v for expr in self._assigned[name] if expr is not None for v in self.values(expr)]
            self.names[name] = values or [f"<{name}>"]
        return self.names.get(name, [])

    def values(self, expr: ast.expr) -> list:
        free = sorted({n.id for n in ast.walk(expr) if isinstance(n, ast.Name)
                       and (n.id in self.names or n.id in self._assigned)})
        out = []
        for combo in itertools.product(*(self.lookup(n) for n in free)):
            try:
                out.append(self._eval(expr, dict(zip(free, combo))))
            except Exception:
                pass
        return [v for v in out if isinstance(v, str)]

    def resolve(self, expr: ast.expr):
        try:
            return self._eval(expr, {})
        except Exception:
            return None


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and _is_name(node.value, "os")


def _code_reads() -> _Reads:
    """What lm-eval's loader hooks read from the task metadata (and the environment), plus every
    `PROPME_*` variable any function of the packages reads directly."""
    from propme_tasks import hooks, likelihood

    reads = _Reads()
    reads.follow(hooks.load_prompts, "meta", {})
    reads.follow(likelihood.load_documents, "meta", {})  # the likelihood subtask's own keys
    for package in (propme, propme_metrics, propme_tasks):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = __import__(info.name, fromlist=["_"])
            for _, func in inspect.getmembers(module, inspect.isfunction):
                if func.__module__ == info.name:
                    reads.follow(func, None, {})
    reads.env = {v for v in reads.env if v.startswith("PROPME_")}
    return reads


@pytest.fixture(scope="session")
def reads() -> _Reads:
    """Computed once per session, and only where a test asks: it imports every module of both packages."""
    return _code_reads()


def _wildcard(name: str) -> re.Pattern:
    """`<corpus>_index` as a pattern that `dynaword_index` matches."""
    return re.compile("".join(".+" if p.startswith("<") else re.escape(p)
                              for p in re.split(r"(<[^>]+>)", name) if p) + r"\Z")


def _names_match(written: str, known: set[str]) -> bool:
    return written in known or any(_wildcard(k).match(written) or _wildcard(written).match(k) for k in known)


def _documented_keys() -> set[str]:
    """The first column of every docs table whose first header is `key`."""
    keys = set()
    for path in DOCS:
        for table in _tables(_text(path)):
            if table[0][0] == "key":
                keys |= {k for row in table[1:] for k in re.findall(r"`([^`]+)`", row[0])}
    return keys


def test_code_reads_were_found(reads):
    assert not reads.unresolved, f"metadata keys or variables this test cannot name: {reads.unresolved}"
    assert {"n_prompts", "<corpus>_index", "<corpus>_<setting>_prompts", "trace_mode", "tokenizer"} <= reads.keys
    assert {"PROPME_<CORPUS>_INDEX", "PROPME_TRACE_MODE", "PROPME_DEBUG", "PROPME_LMEVAL_DISCOVERY"} <= reads.env


def test_documented_metadata_keys_are_the_keys_the_code_reads(reads):
    documented = _documented_keys()
    assert documented - READ_BY_LMEVAL - reads.keys == set(), "documented, but no code reads them"
    assert reads.keys - documented == set(), "read by the code, but in no table of the docs"


def test_documented_environment_variables_are_the_ones_the_code_reads(reads):
    written = {m.rstrip("_") for path in DOCS for m in re.findall(r"PROPME_[A-Z0-9_<>]+", _text(path))} - {"PROPME"}
    unknown = {w for w in written if not _names_match(w, reads.env)}
    assert not unknown, f"documented, but no code reads them: {sorted(unknown)}"
    assert reads.env - written == set(), "read by the code, but named nowhere in the docs"


def test_metadata_in_examples_uses_keys_the_code_reads(reads):
    examples = []
    for path in DOCS:
        for raw in re.findall(r"--metadata '(\{.*?\})'", _text(path), flags=re.S):
            examples += [(path.name, key) for key in json.loads(raw)]
    assert examples
    unknown = [(name, key) for name, key in examples if not _names_match(key, reads.keys | READ_BY_LMEVAL)]
    assert not unknown, f"--metadata keys that no code reads: {unknown}"


def test_tasks_new_example_has_the_task_version():
    from propme_tasks.custom import TASK_VERSION

    versions = re.findall(r"^  version: (\S+)$", _text(ROOT / "docs" / "cli.md"), flags=re.M)
    assert versions and all(float(v) == TASK_VERSION for v in versions)


# --- links and snippets ----------------------------------------------------------------------------

def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_relative_links_and_anchors_resolve():
    broken = []
    for path in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(_text(path))):
            if re.match(r"[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append((path.name, target))
            elif anchor and dest.suffix == ".md":
                anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", _prose(_text(dest)), flags=re.M)}
                if anchor not in anchors:
                    broken.append((path.name, target))
    assert not broken, f"links to missing files or headings: {broken}"


#: a repository path written in backticks: folders, then a file with one of the repository's extensions
NAMED_PATH = re.compile(r"`([\w.\-/]+/[\w.\-]+\.(?:py|md|j2|c|cfg|toml|yaml|css|js|sh))`")
#: other repositories the docs cite files of (a path in the same paragraph as one is that repository's)
OTHER_REPOSITORIES = ("N-essuno/PropMe",)
#: where a path in the docs or a docstring may be relative to: the repository and its packages
PATH_BASES = (ROOT, ROOT / "propme", ROOT / "propme_metrics", ROOT / "propme_tasks")


def missing_paths(text: str, *bases: Path) -> list[str]:
    """Every path `text` names in backticks that exists under none of `bases` (paragraphs that cite another
    repository left out)."""
    out = []
    for paragraph in re.split(r"\n\s*\n", text):
        if any(repo in paragraph for repo in OTHER_REPOSITORIES):
            continue
        out += [p for p in NAMED_PATH.findall(paragraph) if not any((b / p).exists() for b in bases)]
    return out


def test_every_file_the_docs_and_docstrings_name_exists():
    """docs/, README.md and the modules' docstrings name files that exist (they named `report/leaks.py`,
    long gone, and placed `UNDEFINED` in ratio.py)."""
    found = {doc.name: missing_paths(_text(doc), *PATH_BASES, doc.parent) for doc in DOCS}
    sources = [p for package in PATH_BASES[1:] for p in package.rglob("*.py")] + sorted((ROOT / "benchmarks").glob("*.py"))
    found |= {str(p.relative_to(ROOT)): missing_paths(_text(p), *PATH_BASES, p.parent, p.parent.parent)
              for p in sources}
    assert {name: paths for name, paths in found.items() if paths} == {}
    assert missing_paths("see `report/leaks.py`", *PATH_BASES) == ["report/leaks.py"]  # the check can fail
    assert missing_paths("see `metrics/provenance_analysis.py`", *PATH_BASES) == []


def test_readme_pictures_exist():
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", _text(ROOT / "README.md"))
    assert len(pictures) == 3 and all((ROOT / p).is_file() and p.startswith("docs/images/") for p in pictures)


def _python_blocks(path: Path, under: str | None = None) -> list[str]:
    text = _text(path)
    if under is not None:
        text = text[text.index(under):]
        text = text[: text.index("\n## ", 1)] if "\n## " in text[1:] else text
    return [body for lang, body in _fences(text) if lang == "python"]


@pytest.fixture
def corpus_folder(tmp_path, monkeypatch, synthetic_records):
    """`corpus/` in a fresh working folder, as the snippets expect."""
    from support.corpora import write_jsonl

    write_jsonl(tmp_path / "corpus" / "docs.jsonl", synthetic_records)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _offline(code: str, gpt2_dir: Path) -> str:
    """The snippet with the hub's `gpt2` tokenizer replaced by the same tokenizer's files on disk."""
    assert 'tokenizer="gpt2"' in code
    return code.replace('tokenizer="gpt2"', f"tokenizer={str(gpt2_dir)!r}")


def test_readme_python_api_snippet_runs(corpus_folder, gpt2_dir, capsys):
    (code,) = _python_blocks(ROOT / "README.md")
    exec(compile(_offline(code, gpt2_dir), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "NVR" in out and "FMR" in out and (corpus_folder / "index" / "propme-manifest.json").is_file()


def test_python_api_page_snippets_run(corpus_folder, gpt2_dir):
    """docs/python-api.md's examples up to the ones that need lm-eval runs or a model download."""
    text = _text(ROOT / "docs" / "python-api.md")
    text = text[: text.index("## Reports")]
    blocks = [body for lang, body in _fences(text) if lang == "python"]
    assert len(blocks) == 5  # the supported names, then index, prompts, tracing, PM
    namespace: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(_offline(code, gpt2_dir) if 'tokenizer="gpt2"' in code else code, f"python-api.md block {i + 1}", "exec"), namespace)
    assert namespace["again"].records == namespace["prompts"].records
    assert namespace["summary"].n_generations == 2
