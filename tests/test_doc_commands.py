"""What the docs tell a user to type still exists: every ``runtrail …`` command line parses with
today's CLI, every ``RUNTRAIL_*`` variable is one the code reads, every ``make X`` is a target.

A new user copies command lines from the README and docs/; a flag or subcommand renamed in the
code but not in a document hands them a usage error on their first try. Each Markdown file of
the checkout is checked on its own (the test ID names it, a failure names each line):

* **commands**: every shell line of a fenced block (untagged, ``bash``, ``sh``, ``shell``,
  ``console``, ``zsh``) and every inline code span that runs ``runtrail`` (also ``.venv/bin/runtrail``,
  ``python -m runtrail_tools.cli.main``, and ``./runtrail-demo``, whose flags other than
  ``--help`` all go to ``runtrail demo --up``). Each is parsed in process by the real parser
  (:func:`runtrail_tools.cli.main.build_parser`) with abbreviated options refused, executing
  nothing. Shell is read as a user would: ``\\`` continuations, ``# comments``, ``|``, ``&&``
  and ``;`` (the runtrail part is taken), ``VAR=value`` before the command. Docs write a
  synopsis too: ``[--flag VALUE]`` is read as given, ``a|b`` (no spaces) as each alternative,
  an indented line starting with ``[`` or ``-`` as the line above continued. A placeholder
  (``RUN``, ``N``, ``KEY=VALUE``, ``<run-id>``, ``$VAR``, anything with ``…``) may stand for
  any value: where the parser refuses it (an ``int``, a choice) a valid value is put in its
  place; an ``…`` left over is dropped. An unknown flag, an unknown subcommand or a real value
  the parser refuses fails. A required argument may be left out by an inline mention (prose
  names ``runtrail sessions show``) or a line elided with ``…``, not by a whole line of a
  block. ``runtrail run SERVICE`` must also name a registered service, and its ``-o KEY=…``
  an option of it, since the parser leaves those to the service's start. A renamed flag or
  subcommand keeps answering under its old name, hidden from ``--help`` (``kafka up --port``,
  ``audit checkpoint``): a doc that still uses one fails too, or it would go stale unseen.
* **variables**: every ``RUNTRAIL_[A-Z0-9_]+`` anywhere in the text is a setting (a field of
  a ``RUNTRAIL_``-prefixed settings class: the catalog of ``docs/CONFIGURATION.md``, the demo's
  ``RUNTRAIL_DEMO_*``), an old name a service still reads (``deprecated``), or a name the code
  reads (spelled out in a source file); ``RUNTRAIL_X_*`` / ``RUNTRAIL_X_<NAME>`` name a prefix
  some variable has, ``RUNTRAIL_X[_FILE]`` both spellings. A name a service has ``renamed``
  (which it refuses) fails even where the code still spells it.
* **make targets**: every ``make X`` of a command line is a target of the Makefile.

Two allow-lists, each entry with its reason, keyed by the span's exact text:
:data:`NOT_COMMANDS` (inline code that only looks like a command) and :data:`OLD_NAMES_NAMED`
(a hidden old name the docs name as such). What is found is counted too (:func:`test_the_docs_hold_what_is_checked`), so a change that
made the extraction find nothing cannot pass for clean docs, and a deliberately stale snippet is
checked to fail (:func:`test_a_stale_snippet_fails`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import itertools
import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from pydantic_settings import BaseSettings

from runtrail.config import ServiceSettings
from runtrail.runtime.registry import RAW_SERVICES, RECEIVERS, SERVICES
from runtrail_tools.cli.main import COMMAND_HELP, build_parser

ROOT = Path(__file__).resolve().parents[1]
#: folders whose Markdown is not the project's documentation (besides hidden ones: .venv…)
SKIPPED_DIRS = {ROOT / "bench" / "results", ROOT / "node_modules"}
#: fenced blocks read as shell; other languages (python, json, java) hold no command lines
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console", "zsh"}

#: Inline code that starts like a command but is not one, each with its reason. Keyed by the
#: span's exact text, so a change to it is checked again. Keep it tiny.
NOT_COMMANDS: dict[str, str] = {
    "runtrail audit needs cryptography: pip install 'runtrail[services]'": (
        "the error message a command prints when its extra is missing, quoted in the README"
    ),
}
#: Inline code naming a hidden old name on purpose (a renamed command or flag keeps answering
#: under its old name, hidden from --help; docs must otherwise use today's), with the reason.
OLD_NAMES_NAMED: dict[str, str] = {
    "runtrail audit checkpoint": "AUDIT.md and ARCHITECTURE.md say it is the old name of "
    "`audit tree-head` that still answers",
}


def markdown_files() -> list[Path]:
    """Every ``*.md`` of the checkout, hidden folders (.venv, .git…) and generated ones aside."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and here / d not in SKIPPED_DIRS)
        found.extend(here / f for f in sorted(files) if f.endswith(".md"))
    return found


DOCS = markdown_files()
IDS = [str(doc.relative_to(ROOT)) for doc in DOCS]


# --- snippets: shell lines of fenced blocks and inline code spans ----------------------------


@dataclass(frozen=True)
class Snippet:
    """A piece of shell as the document gives it: a logical line of a block or an inline span."""

    line: int
    text: str
    inline: bool


_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def _strip_comment(line: str) -> str:
    """``line`` without a shell comment: a ``#`` starting a word, outside quotes."""
    quote = ""
    for at, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or line[at - 1].isspace()):
            return line[:at]
    return line


def snippets(text: str) -> Iterator[Snippet]:
    """The shell lines of the fenced blocks, then the inline code spans of the rest."""
    lines = text.splitlines()
    prose = list(lines)
    fence: str | None = None
    shell = False
    logical: list[tuple[int, str]] = []  # (first line, text) of a block's logical lines
    pending: tuple[int, str] | None = None  # a line continued with a backslash
    for number, line in enumerate(lines, 1):
        opened = _FENCE.match(line)
        if fence is None:
            if opened:
                fence, shell = opened.group(1), opened.group(2).lower() in SHELL_BLOCKS
                prose[number - 1] = ""
            continue
        prose[number - 1] = ""
        if line.strip().startswith(fence[:3]) and line.strip().strip(fence[0]) == "":
            fence = None
            continue
        if not shell:
            continue
        code = _strip_comment(line.removeprefix("$ ")).rstrip()
        if pending is not None:
            pending = (pending[0], f"{pending[1]} {code.strip()}")
        elif logical and code[:1].isspace() and code.lstrip()[:1] in ("[", "-"):
            first, before = logical.pop()  # a synopsis: the line above, continued
            pending = (first, f"{before} {code.strip()}")
        else:
            pending = (number, code)
        if pending[1].endswith("\\"):
            pending = (pending[0], pending[1][:-1])
            continue
        logical.append(pending)
        pending = None
    yield from (Snippet(n, t, inline=False) for n, t in logical if t.strip())
    # inline spans, one paragraph at a time (an unmatched backtick stays in its paragraph)
    paragraph_start = 0
    body = "\n".join(prose)
    for paragraph in re.split(r"(\n[ \t]*\n)", body):
        if paragraph.strip():
            for span in _SPAN.finditer(paragraph):
                at = body.count("\n", 0, paragraph_start + span.start()) + 1
                content = re.sub(r"\s*\n\s*", " ", span.group(2)).replace("\\|", "|").strip()
                yield Snippet(at, content, inline=True)
        paragraph_start += len(paragraph)


# --- from a snippet to the command lines in it -----------------------------------------------

_ELLIPSIS = ("…", "...")
_PLACEHOLDER = re.compile(
    r"""[A-Z][A-Z0-9_]*(?:[=:,./@|+-][A-Za-z0-9_]*)*  # RUN, N, KEY=VALUE, HOST:PORT, K+1
      | \$\{?\w+\}?.*                              # a shell variable
      | .*(?:…|\.\.\.).*                           # elided""",
    re.X,
)
_OPERATORS = {"|", "||", "&&", ";", "&", "(", ")", "|&", ";;"}
_REDIRECTS = {">", ">>", "<", ">&", "&>", "<&", ">|", "<<", "<<<", "&>>"}
_WRAPPERS = {"exec", "time", "nohup", "env", "command"}


def is_placeholder(value: str) -> bool:
    return _PLACEHOLDER.fullmatch(value) is not None


def _alternatives(text: str) -> list[str]:
    """``text`` once per choice of each ``a|b`` written without spaces (a synopsis' choice)."""
    words = text.split(" ")
    choices = [w.split("|") if re.fullmatch(r"[^|'\"]+(?:\|[^|'\"]+)+", w) else [w] for w in words]
    return [" ".join(pick) for pick in itertools.product(*choices)]


def _segments(text: str) -> Iterator[list[str]]:
    """The simple commands of one line of shell, their redirections dropped."""
    text = re.sub(r"<[^<>\s][^<>\n]*>", "VALUE", text)  # <run-id>: a placeholder
    text = re.sub(r"(?<!\S)\[|\](?!\S)", " ", text)  # [--optional ARG]: read as given
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # comments are gone already (shlex would cut a#b too)
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: prose, not shell
        return
    words: list[str] = []
    skip = False
    for token in tokens:
        if skip:
            skip = False
        elif token in _REDIRECTS:
            skip = True
        elif token in _OPERATORS:
            if words:
                yield words
            words = []
        else:
            words.append(token)
    if words:
        yield words


@dataclass(frozen=True)
class Invocation:
    """One command line of a document: ``runtrail`` with ``argv``, or ``make`` with ``argv``."""

    program: str  # "runtrail", "runtrail-demo" or "make"
    argv: tuple[str, ...]
    line: int
    inline: bool
    text: str


def invocations(snippet: Snippet) -> Iterator[Invocation]:
    if snippet.inline and snippet.text in NOT_COMMANDS:
        return
    for text in _alternatives(snippet.text):
        for words in _segments(text):
            while words and (re.match(r"[A-Za-z_]\w*=", words[0]) or words[0] in _WRAPPERS):
                words = words[1:]  # VAR=value before the command, exec, time…
            if not words:
                continue
            name = Path(words[0]).name
            if name == "runtrail":
                program, argv = "runtrail", words[1:]
            elif name == "runtrail-demo":
                program, argv = "runtrail-demo", words[1:]
            elif re.fullmatch(r"python[\d.]*", name) and words[1:3] in (
                ["-m", "runtrail_tools.cli.main"],
                ["-m", "runtrail_tools.cli"],
            ):
                program, argv = "runtrail", words[3:]
            elif name == "make" or words[0] == "$(MAKE)":
                program, argv = "make", words[1:]
            else:
                continue
            yield Invocation(program, tuple(argv), snippet.line, snippet.inline, snippet.text)


def document_invocations(doc: Path) -> list[Invocation]:
    return [i for s in snippets(doc.read_text(encoding="utf-8")) for i in invocations(s)]


# --- parsing a command line with the real parser ---------------------------------------------


class ParseFailure(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(f"{parser.prog}: {message}")
        self.parser = parser
        self.message = message


def _refuse(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    raise ParseFailure(parser, message)


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases: once each
                yield from _parsers(sub)


@functools.cache
def cli_parser() -> argparse.ArgumentParser:
    """The parser of every command, raising :class:`ParseFailure` instead of exiting, and
    refusing abbreviations: ``--kafka`` must not pass for a renamed ``--kafka-port``."""
    parser = build_parser()
    for each in _parsers(parser):
        each.allow_abbrev = False
        each.error = functools.partial(_refuse, each)  # type: ignore[method-assign]
    return parser


def _action(parser: argparse.ArgumentParser, name: str) -> argparse.Action | None:
    """The action of ``parser`` an error message names (``--tenant``, ``SERVICE``…)."""
    for action in parser._actions:
        names = {argparse._get_action_name(action), action.dest, *action.option_strings}
        if action.metavar is not None:
            names.add(str(action.metavar))
        if name in names or name.split("/")[0] in action.option_strings:
            return action
    return None


def _value_for(action: argparse.Action) -> str | None:
    """A value ``action`` accepts, to put in a placeholder's place."""
    if action.choices:
        return str(next(iter(action.choices)))
    convert: Any = action.type
    if convert is None:
        return "VALUE"
    for candidate in ("1", "2024-01-01T00:00:00Z", "1h", "a=b", "x"):
        with contextlib.suppress(Exception):
            convert(candidate)
            return candidate
    return None


def _filled(action: argparse.Action) -> list[str] | None:
    """Words that give a missing required ``action``: its option and a value."""
    value = _value_for(action)
    if value is None:
        return None
    values = [value] * (action.nargs if isinstance(action.nargs, int) else 1)  # 0: a flag
    return [action.option_strings[-1], *values] if action.option_strings else values


def _repaired(failure: ParseFailure, argv: list[str], complete: bool) -> list[str] | None:
    """``argv`` with what the failure is about replaced by a valid value, when that is a
    placeholder or an elision (None: the failure stands)."""
    message = failure.message
    invalid = re.match(r"argument (.+?): invalid (?:choice: |.* value: )'(.*?)'", message)
    if invalid:
        given = invalid.group(2)
        action = _action(failure.parser, invalid.group(1))
        if action is None:
            return None
        if action.choices and all(c in action.choices for c in given.split("/")):
            value: str | None = given.split("/")[0]  # `audit log-prove/log-consistency`: each
        elif is_placeholder(given) and not (
            # choices spelled like placeholders (`--type MODEL`): a wrong one is a typo
            any(is_placeholder(str(c)) for c in action.choices or ())
            and not any(e in given for e in _ELLIPSIS)
        ):
            value = _value_for(action)
        else:
            return None
        if value is None or value == given:
            return None
        return [value if w == given else w for w in argv]
    extra = re.match(r"unrecognized arguments: (.*)", message)
    if extra and all(w in _ELLIPSIS for w in extra.group(1).split()):
        return [w for w in argv if w not in _ELLIPSIS]
    if complete:
        return None
    # an inline mention of an option, without its value: `runtrail audit verify --file`
    bare = re.match(r"argument (.+?): expected (?:one|at least one) argument", message)
    if bare:
        action = _action(failure.parser, bare.group(1))
        value = _value_for(action) if action is not None else None
        spelled = [at for at, w in enumerate(argv) if action and w in action.option_strings]
        if value is None or not spelled:
            return None
        return [*argv[: spelled[-1] + 1], value, *argv[spelled[-1] + 1 :]]
    required = re.match(r"the following arguments are required: (.*)", message)
    one_of = re.match(r"one of the arguments (.*) is required", message)
    names = (
        required.group(1).split(", ") if required else one_of.group(1).split()[:1] if one_of else []
    )
    added: list[str] = []
    for name in names:
        action = _action(failure.parser, name)
        words = _filled(action) if action is not None else None
        if words is None:
            return None
        added.extend(words)
    return [*argv, *added] if added else None


def _service_options(service: str) -> set[str] | None:
    """The ``-o`` keys of ``service`` (None: it has no settings class, so it takes none)."""
    from runtrail_tools.settings_catalog import sections

    classes = [s.cls for s in sections() if s.name == service]
    if not classes:
        return None
    keys: set[str] = set()
    for cls in classes:
        keys |= set(cls.model_fields)
        if issubclass(cls, ServiceSettings):
            keys |= set(cls.deprecated)
    return keys


def _hidden_names(argv: list[str]) -> list[str]:
    """The old names in ``argv``: a subcommand left out of its parent's list, or an option whose
    help is suppressed (a rename keeps the old spelling answering, unlisted)."""
    parser, found = cli_parser(), []
    for word in argv:
        commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if commands and word in commands[0].choices:
            if word not in {c.dest for c in commands[0]._choices_actions}:
                found.append(f"{parser.prog} {word}")
            parser = commands[0].choices[word]
        elif word.startswith("-"):
            action = parser._option_string_actions.get(word.split("=", 1)[0])
            if action is not None and action.help == argparse.SUPPRESS and action.dest != "help":
                found.append(f"{parser.prog} {word.split('=', 1)[0]}")
    return found


def _run_problem(service: str, options: list[str]) -> str | None:
    """What ``runtrail run`` would refuse at its start: an unknown service or option."""
    if is_placeholder(service):
        return None
    if service not in {**SERVICES, **RAW_SERVICES, **RECEIVERS}:
        return f"runtrail run: no service named {service!r}"
    known = _service_options(service) or set()
    for option in options:
        key = option.split("=", 1)[0]
        if option != "key=value" and not is_placeholder(key) and key not in known:
            return f"runtrail run {service}: unknown option {key!r} (known: {sorted(known)})"
    return None


def parse_problem(invocation: Invocation) -> str | None:
    """Why the command line does not parse with today's CLI, or None."""
    argv = list(invocation.argv)
    if invocation.program == "runtrail-demo":
        if "-h" in argv or "--help" in argv:
            return None  # the script's own help, before anything runs
        argv = ["demo", "--up", *argv]  # every other flag goes to `runtrail demo --up`
    elided = any(any(e in w for e in _ELLIPSIS) for w in argv)
    parsed = _parse(argv, complete=not (invocation.inline or elided))
    if isinstance(parsed, str):
        return parsed
    hidden = _hidden_names(argv)
    if hidden and not (invocation.inline and invocation.text in OLD_NAMES_NAMED):
        return f"an old name, hidden from --help (use today's): {', '.join(hidden)}"
    if argv[:1] == ["run"] and len(argv) > 1 and not argv[1].startswith("-"):
        options = parsed.option if parsed is not None else []  # None: it printed its --help
        return _run_problem(argv[1], options)
    return None


def _parse(argv: list[str], complete: bool) -> argparse.Namespace | str | None:
    """The parsed command line, its problem, or None where it stopped at ``--help``."""
    for _ in range(12):
        try:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                return cli_parser().parse_args(argv)
        except SystemExit as exit_:  # --help, --version
            return None if exit_.code in (0, None) else f"exit status {exit_.code}"
        except ParseFailure as failure:
            repaired = _repaired(failure, argv, complete)
            if repaired is None:
                return str(failure)
            argv = repaired
    return f"no valid reading of {argv}"


# --- variables and make targets ---------------------------------------------------------------

_CODE_SUFFIXES = {".py", ".sh", ".java", ".rs", ".go", ".kt"}
_CODE_FILES = {"Makefile", "runtrail-demo", "Dockerfile"}
_VARIABLE = re.compile(r"RUNTRAIL_[A-Z0-9_]*")


def _code_files() -> Iterator[Path]:
    """The checkout's code (what could read a variable), this file aside."""
    skipped = {ROOT / "target", ROOT / "node_modules", *SKIPPED_DIRS}
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        dirs[:] = [
            d
            for d in dirs
            if (not d.startswith(".") or here / d == ROOT / ".ci")
            and d not in ("target", "node_modules", "__pycache__")
            and here / d not in skipped
        ]
        for name in files:
            path = here / name
            if (
                path.suffix in _CODE_SUFFIXES or name in _CODE_FILES or path == ROOT / ".ci" / "run"
            ) and path != Path(__file__).resolve():
                yield path


def _settings_classes() -> Iterator[type[BaseSettings]]:
    import runtrail_tools.demo.targets  # noqa: F401  (the demo's RUNTRAIL_DEMO_* settings)
    from runtrail_tools.settings_catalog import sections

    yield from (s.cls for s in sections())
    stack: list[type[BaseSettings]] = [BaseSettings]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        yield cls


@functools.cache
def known_variables() -> tuple[frozenset[str], frozenset[str]]:
    """(the variables the code reads, the old names it refuses)."""
    known: set[str] = set()
    refused: set[str] = set()
    for cls in _settings_classes():
        prefix = str(cls.model_config.get("env_prefix", ""))
        if not prefix.startswith("RUNTRAIL_"):
            continue
        known |= {f"{prefix}{name}".upper() for name in cls.model_fields}
        if issubclass(cls, ServiceSettings):
            known |= {f"{prefix}{old}".upper() for old in cls.deprecated}
            refused |= {f"{prefix}{old}".upper() for old in cls.renamed}
    for path in _code_files():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            known |= set(_VARIABLE.findall(path.read_text(encoding="utf-8")))
    return frozenset(known - refused), frozenset(refused)


def variable_problems(doc: Path) -> list[str]:
    known, refused = known_variables()
    problems = []
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        for match in _VARIABLE.finditer(line):
            name, after = match.group(0), line[match.end() :]
            if name.endswith("_") or after.startswith(("*", "<", "{")):  # a prefix
                if not any(k.startswith(name) for k in known):
                    problems.append(f"{number}: no variable starts with {name}")
                continue
            names = [name]
            optional = re.match(r"\[(_[A-Z0-9_]+)\]", after)  # RUNTRAIL_X[_FILE]
            if optional:
                names.append(name + optional.group(1))
            for each in names:
                if each in refused:
                    problems.append(f"{number}: {each} was renamed (the code refuses it)")
                elif each not in known:
                    problems.append(f"{number}: {each} is no setting and no code reads it")
    return problems


@functools.cache
def make_targets() -> frozenset[str]:
    targets: set[str] = set()
    for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines():
        rule = re.match(r"([^\s#=:$][^#=:]*?)\s*::?(?!=)", line)
        if rule:
            targets |= {t for t in rule.group(1).split() if re.fullmatch(r"\w[\w.-]*", t)}
    return frozenset(targets)


def make_problem(invocation: Invocation) -> str | None:
    words = iter(invocation.argv)
    for word in words:
        if word in ("-C", "-f", "-j", "-o", "-W", "-I"):
            next(words, None)  # the option's value
        elif word.startswith("-") or "=" in word:
            continue
        elif word not in make_targets():
            return f"make: no target {word!r} in the Makefile"
    return None


# --- the tests ---------------------------------------------------------------------------------


def _report(doc: Path, problems: list[str]) -> str:
    name = doc.relative_to(ROOT)
    return "stale in the docs:\n" + "\n".join(f"  {name}:{p}" for p in problems)


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_documented_command_line_parses(doc: Path) -> None:
    problems = []
    for invocation in document_invocations(doc):
        if invocation.program != "make":
            problem = parse_problem(invocation)
            if problem is not None:
                problems.append(f"{invocation.line}: `{invocation.text}`\n      {problem}")
    assert not problems, _report(doc, problems)


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_documented_variable_exists(doc: Path) -> None:
    problems = variable_problems(doc)
    assert not problems, _report(doc, problems)


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_documented_make_target_exists(doc: Path) -> None:
    problems = []
    for invocation in document_invocations(doc):
        if invocation.program == "make":
            problem = make_problem(invocation)
            if problem is not None:
                problems.append(f"{invocation.line}: `{invocation.text}`\n      {problem}")
    assert not problems, _report(doc, problems)


def test_the_docs_hold_what_is_checked() -> None:
    """The checks see the docs' commands: were the extraction to find nothing, every test
    above would pass on any docs. Also every command is really built (a command whose extra
    is not installed parses anything)."""
    found = [i for doc in DOCS for i in document_invocations(doc)]
    runtrail = [i for i in found if i.program != "make"]
    assert len(runtrail) > 200 and sum(not i.inline for i in runtrail) > 50, len(runtrail)
    assert any(i.program == "runtrail-demo" for i in found)
    assert any(i.program == "make" for i in found)
    commands = next(
        a for a in cli_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
    assert set(commands) == set(COMMAND_HELP)
    stubs = [  # main.register_missing: a command whose extra is missing takes any words
        c for c, p in commands.items() if any(a.nargs == argparse.REMAINDER for a in p._actions)
    ]
    assert not stubs, f"commands not built (an extra is missing): {stubs}"


STALE = """\
Start it:

```bash
RUNTRAIL_TENANT=acme runtrail kafka up --kafka-prot 19092 && runtrail topics ensure
runtrail offsets set projector --partition N \\
    --to-offset 12   # fine: N is a placeholder
.venv/bin/runtrail projection lsit | head
./runtrail-demo --no-such-flag
make no-such-target
runtrail kafka up --port 19092
runtrail audit verify          # a whole line must give what is required
runtrail audit prove --run <run-id> --tree-head-id ID --tenant acme
runtrail capture query --run R --type MODLE
runtrail run capturer --help
```

Then `runtrail run projector -o store_url=x -o snapshot_evry=5`, `runtrail kafka up --kafka`
(an abbreviation), `runtrail dev up|status|dwn`, `runtrail sessions show` (a mention), `runtrail
audit checkpoint` (named as the old name), `make test-fast`, and
`RUNTRAIL_NO_SUCH_SETTING` or `RUNTRAIL_SESSIONS_IDLE_CHECKPOINT_S` (renamed).
"""


def _problem(invocation: Invocation) -> str | None:
    if invocation.program == "make":
        return make_problem(invocation)
    return parse_problem(invocation)


def test_a_stale_snippet_fails(tmp_path: Path) -> None:
    """The checks catch what goes stale (a misspelt flag or subcommand, an abbreviation, an old
    hidden name, a wrong service option, a missing required argument in a block, an unknown
    variable or target) and let placeholders, mentions and synopses pass."""
    doc = tmp_path / "STALE.md"
    doc.write_text(STALE)
    found = document_invocations(doc)
    assert len(found) == 19, found
    problems = {(i.line, " ".join(i.argv)): _problem(i) for i in found}
    failing = {where: problem for where, problem in problems.items() if problem}
    assert set(failing) == {
        (4, "kafka up --kafka-prot 19092"),
        (7, "projection lsit"),
        (8, "--no-such-flag"),
        (9, "no-such-target"),
        (10, "kafka up --port 19092"),
        (11, "audit verify"),
        (13, "capture query --run R --type MODLE"),
        (14, "run capturer --help"),
        (17, "run projector -o store_url=x -o snapshot_evry=5"),
        (17, "kafka up --kafka"),
        (18, "dev dwn"),
    }, failing
    assert "unrecognized arguments: --kafka-prot 19092" in str(
        failing[4, "kafka up --kafka-prot 19092"]
    )
    assert "invalid choice: 'lsit'" in str(failing[7, "projection lsit"])
    assert "hidden" in str(failing[10, "kafka up --port 19092"])
    assert "snapshot_evry" in str(failing[17, "run projector -o store_url=x -o snapshot_evry=5"])
    assert variable_problems(doc) == [
        "20: RUNTRAIL_NO_SUCH_SETTING is no setting and no code reads it",
        "20: RUNTRAIL_SESSIONS_IDLE_CHECKPOINT_S was renamed (the code refuses it)",
    ]
