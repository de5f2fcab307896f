"""The documentation against what it documents: README.md, the pages of the docs site (``docs/*.md``) and
CONTRIBUTING.md. Every flag they name is a real option (of the command it is given to, in their examples), the
flag tables list real flags with the defaults ``--help`` shows (``docs/scheduler.md``, ``docs/cli.md``), and the
chart-values table (``docs/install.md``) names keys of ``charts/hami/values.yaml`` with their defaults there. The
README stays short and speaks only of the project; its links lead somewhere."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from hami.cli import app

ROOT = Path(__file__).resolve().parents[2]
PAGES = {
    path.relative_to(ROOT).as_posix(): path.read_text()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "CONTRIBUTING.md"]
}
"""Every document a reader has, by its path in the repository."""
README = PAGES["README.md"]
DOCS = "\n".join(PAGES.values())
"""All of them as one text, for the checks that hold wherever a flag or a path is named."""
VALUES = yaml.safe_load((ROOT / "charts/hami/values.yaml").read_text())

FOREIGN_FLAGS = {
    # helm
    "--set": "helm",
    "--create-namespace": "helm",
    "--reuse-values": "helm",
    "--install": "helm",  # helm upgrade --install
    "--field-selector": "kubectl",  # kubectl get events --field-selector reason=...
    "--replicas": "kubectl",  # kubectl scale
    "--flag": "a placeholder",  # Go's `--flag=true|false` form
    # kubectl create clusterrolebinding / kubectl in general
    "--clusterrole": "kubectl",
    "--serviceaccount": "kubectl",
    "--validate": "kubectl",  # kubectl apply --validate=warn|strict (hami simulate's unknown-field warnings)
    # kube-apiserver, as the test control plane runs it
    "--runtime-config": "kube-apiserver",
    "--max-requests-inflight": "kube-apiserver",
    "--max-mutating-requests-inflight": "kube-apiserver",
    "--endpoint-reconciler-type": "kube-apiserver",
    "--kubelet-preferred-address-types": "kube-apiserver",
    "--enable-priority-and-fairness": "kube-apiserver",
    # unshare (util-linux), git, pip
    "--uts": "unshare",
    "--recurse-submodules": "git",
    "--branch": "git",
    "--no-deps": "pip",
    "--build-arg": "docker",  # docker build --build-arg HAMI_BUILD_COMMIT=... (hami version's commit)
    # scripts/k8s-testenv and bench/ (their own argparse)
    "--k8s-version": "scripts/k8s-testenv",
    "--quick": "bench",
    "--only": "bench",
    "--e2e-rounds": "bench",
    "--before": "bench",
}


def _commands() -> dict[str, dict[str, str]]:
    """Each command's options: flag → its help text (with Click's ``[default: …]`` when shown)."""
    group: Any = typer.main.get_command(app)
    out: dict[str, dict[str, str]] = {}
    for name, command in group.commands.items():
        options: dict[str, str] = {}
        for param in command.params:
            record = param.get_help_record(typer.Context(command)) if hasattr(param, "get_help_record") else None
            text = record[1] if record else ""
            for flag in (*param.opts, *getattr(param, "secondary_opts", ())):
                if flag.startswith("-"):
                    options[flag] = text
        out[name] = options
    return out


COMMANDS = _commands()
EVERY_FLAG = {flag for options in COMMANDS.values() for flag in options} | {"--version", "--help", "-h"}


def _script_flags() -> set[str]:
    """Flags of the repository's own scripts (argparse ``add_argument("--x"``)."""
    found: set[str] = set()
    for path in [*ROOT.glob("scripts/*"), *ROOT.glob("bench/*.py")]:
        found |= set(re.findall(r"""add_argument\(\s*["'](--[a-z][a-z0-9-]*)""", path.read_text()))
    return found


def _klog_flag(flag: str) -> bool:
    """Whether the long-running commands take ``flag`` as one of HAMi's klog flags (``hami.config.klog``)."""
    from hami.config.klog import translate

    return all(not arg.startswith(flag) for arg in translate([f"{flag}=1"]).args)


def test_every_flag_the_docs_name_exists() -> None:
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-zA-Z0-9_-]*)", DOCS))
    scripts = _script_flags()
    known = EVERY_FLAG | set(FOREIGN_FLAGS) | scripts
    unknown = sorted(f for f in named if f not in known and not _klog_flag(f))
    assert not unknown, f"the docs name flags no hami command has: {unknown}"
    stale = sorted(f for f, tool in FOREIGN_FLAGS.items() if f not in named or (tool == "bench" and f not in scripts))
    assert not stale, f"FOREIGN_FLAGS lists flags the docs no longer name or no script has: {stale}"


def _command_lines() -> Iterator[str]:
    """Every ``hami …`` or ``kubectl hami …`` command line the docs show (console blocks and code spans)."""
    for block in re.findall(r"```console\n(.*?)```", DOCS, re.S):
        lines = block.replace("\\\n", " ").splitlines()
        prompted = any(line.startswith("$ ") for line in lines)  # then the other lines are output
        for raw in lines:
            if prompted and not raw.startswith("$ "):
                continue
            line = raw.removeprefix("$ ").strip()
            if line.startswith(("hami ", "kubectl hami ")):
                yield line.split(" #", 1)[0]
    yield from re.findall(r"`((?:kubectl )?hami [^`]+)`", DOCS)


def test_every_example_command_uses_its_own_flags() -> None:
    problems: list[str] = []
    checked = 0
    for line in _command_lines():
        try:
            words = shlex.split(line.replace("…", ""))
        except ValueError:
            continue
        words = words[2:] if words[0] == "kubectl" else words[1:]
        if not words or words[0] not in COMMANDS:
            continue
        options = COMMANDS[words[0]]
        checked += 1
        for word in words[1:]:
            flag = word.split("=", 1)[0]
            known = flag in options or flag in ("-h", "--help")
            if flag.startswith("-") and flag != "-" and not known and not re.fullmatch(r"-\d.*", flag):
                problems.append(f"{line!r}: {flag} is not an option of hami {words[0]}")
    assert checked >= 15
    assert not problems, "\n".join(problems)


def _table(page: str, header: str) -> list[list[str]]:
    """The rows of the table of ``page`` (``docs/….md``) whose header line starts with ``header`` (cells stripped)."""
    text = PAGES[page]
    start = text.index(header)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


_WORDS = {"off": "false", "on": "true", "none": None, "all nodes": None, "JSON": None, "built-in defaults": None}


def test_the_scheduler_flag_table_lists_real_flags_with_their_defaults() -> None:
    options = COMMANDS["scheduler"]
    rows = _table("docs/scheduler.md", "| flag | default | meaning |\n|---|---|---|\n| `--scheduler-name`")
    assert len(rows) >= 20
    for flags_cell, default_cell, _ in rows:
        flags = [f.split()[0] for f in _spans(flags_cell)]
        assert flags, flags_cell
        for flag in flags:
            assert flag in options, f"the scheduler table names {flag}, which hami scheduler does not have"
        shown = _spans(default_cell)
        default = shown[0] if len(flags) == 1 and len(shown) == 1 else _WORDS.get(default_cell)
        if default is None:
            continue
        match = re.search(r"\[default: ([^\]]*)\]", options[flags[0]])
        assert match is not None, f"{flags[0]} shows no default in --help"
        assert match.group(1) == default, f"{flags[0]}: the docs say {default}, --help says {match.group(1)}"


def test_the_cluster_flag_table_is_what_top_and_explain_take() -> None:
    rows = _table("docs/cli.md", "| flag | default | meaning |\n|---|---|---|\n| `--kubeconfig FILE`")
    assert len(rows) >= 6
    for command in ("top", "explain"):
        for flags_cell, _, _ in rows:
            for flag in (span.split()[0] for span in _spans(flags_cell)):
                assert flag in COMMANDS[command], f"hami {command} has no {flag}"


VALUES_PAGE = "docs/install.md"


def _expand(cell: str) -> list[str]:
    """The value paths a first cell names: ``a.<x>.b (`p`, `q`)`` is ``a.p.b`` and ``a.q.b``; a name without a dot
    after a dotted one shares its parent (``devices.nvidia.defaultGPUNum``, ``defaultMemory``)."""
    head, _, listed = cell.partition("(")
    names = _spans(head)
    out: list[str] = []
    parent = ""
    for given in names:
        if "<" in given:
            out += [re.sub(r"<[^>]+>", member, given) for member in _spans(listed)]
            continue
        name = given
        if given.startswith(".") and out:
            name = out[-1].rsplit(".", 1)[0] + given
        elif "." not in given and parent:
            name = f"{parent}.{given}"
        parent = name.rsplit(".", 1)[0] if "." in name else parent
        out.append(name)
    return out


def _lookup(path: str) -> Any:
    node: Any = VALUES
    for part in path.split("."):
        assert isinstance(node, dict), f"{path}: {part!r} is under a value that is not a mapping"
        assert part in node, f"the values table names {path}, which charts/hami/values.yaml lacks"
        node = node[part]
    return node


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return '""' if value == "" else str(value)


def test_the_values_table_checks_defaults_and_names_each_key_once() -> None:
    rows = _table(VALUES_PAGE, "| value | default | what it does |")
    named = [path for row in rows for path in _expand(row[0])]
    assert len(named) == len(set(named)), sorted({p for p in named if named.count(p) > 1})
    checked = sum(1 for row in rows if len(_expand(row[0])) in (1, len(row[1].split(","))))
    assert checked >= 15


@pytest.mark.parametrize("row", _table(VALUES_PAGE, "| value | default | what it does |"), ids=lambda r: r[0][:40])
def test_the_values_table_names_real_keys_with_their_defaults(row: list[str]) -> None:
    keys_cell, default_cell, _ = row
    paths = _expand(keys_cell)
    assert paths, keys_cell
    values = [_lookup(path) for path in paths]
    defaults = [d.strip() for d in default_cell.split(",")]
    if len(defaults) == 1 and len(paths) > 1:
        defaults *= len(paths)  # one default for every key the row expands to
    if len(defaults) != len(paths) or any(not re.fullmatch(r'`[^`]*`|\d+|""', d) for d in defaults):
        return  # described in words ("HAMi's seven Ascend chips"); the keys above are still checked
    for path, value, default in zip(paths, values, defaults, strict=True):
        assert _as_text(value) == default.strip("`"), f"{path}: the docs say {default}, values.yaml has {value!r}"


def test_the_docs_cite_only_what_a_reader_has() -> None:
    """No tracker issue or spec section numbers (documents outside the repository); every repository path they
    name is in the repository, except what ``make bench`` writes (``bench/results/``, git-ignored, said so)."""
    assert not re.findall(r"(?i)\bissue[ -]?#?\d+", DOCS)
    assert "§" not in DOCS
    top = ("src/", "tests/", "charts/", "bench/", "scripts/", "docs/", ".ci/")
    missing = []
    for path in set(re.findall(r"`([\w.-]+/[^`\s]*)`", DOCS)):
        if not path.startswith(top) or path.startswith("bench/results/"):
            continue
        pattern = re.sub(r"<[^>]*>|\{[^}]*\}", "*", path.split("::")[0]).rstrip("/")
        if not any(ROOT.glob(pattern)):
            missing.append(path)
    assert not missing, f"the docs name paths the repository lacks: {sorted(missing)}"


def test_the_readme_is_short_and_its_lines_are_readable() -> None:
    """The README is a front page: what hami is, a demo, a quick start, links. The rest lives in docs/."""
    lines = README.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move the detail into a docs/ page"
    long = [(n, len(line)) for n, line in enumerate(lines, 1) if len(line) > 200]
    assert not long, f"README.md lines over 200 characters (line, length): {long}"


def test_the_readme_leads_with_make_demo_then_make_test() -> None:
    """``make demo`` needs nothing; ``make test`` builds a cluster: a reader tries the first before the second."""
    block = README.split("## Two commands", 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    assert commands == ["make demo", "make test"]


# Sentences about the machine the project is developed on, which a user's cluster is not.
DEV_MACHINE = re.compile(
    r"(?i)\bthis (?:\d+-core |development |quiet )?machine\b|\bdevelopment machine\b|\bmachine's Go module proxy\b"
    r"|\b(?:built|run|ran|passed|measured) here\b|\bnot run here\b|\bno \w+ image here\b"
)


def test_no_sentence_speaks_of_the_development_machine() -> None:
    found = [
        f"{page}:{n}: {match.group(0)!r}"
        for page, text in PAGES.items()
        for n, line in enumerate(text.splitlines(), 1)
        for match in DEV_MACHINE.finditer(line)
    ]
    assert not found, "\n".join(found)


def _slug(heading: str) -> str:
    """A heading's anchor as MkDocs (Python-Markdown's toc) and GitHub make it, for the headings the docs use."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: str) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", PAGES[page], re.M)}


@pytest.mark.parametrize("page", ["README.md", "CONTRIBUTING.md"])
def test_the_links_outside_the_docs_site_lead_somewhere(page: str) -> None:
    """``make docs`` checks the links between docs pages; the README and CONTRIBUTING.md are not part of the site,
    so their relative links (a file, and an anchor in a Markdown file) are checked here."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", PAGES[page]):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        missing_anchor = bool(anchor) and path.endswith(".md") and anchor not in _anchors(path)
        if not (ROOT / path).exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{page} links to what is not there: {broken}"


# A reference to a section of the README ("README "Coming from HAMi"", "see the README"): the sections are docs pages.
README_SECTION = re.compile(r"README(?:'s)? \\?\"|\(README\)|\b(?:the|see) README\b(?!\.md)")


def test_code_and_chart_point_to_the_docs_not_to_readme_sections() -> None:
    """Comments, help texts and messages that send a reader to a section name the docs page it is on now."""
    cited = []
    for folder in ("src", "charts", "scripts", "bench", "tests"):
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or path.suffix in {".pyc", ".png", ".tar"} or ".egg-info" in str(path):
                continue
            if path.name == Path(__file__).name:
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if README_SECTION.search(line):
                    cited.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not cited, "\n".join(cited)
