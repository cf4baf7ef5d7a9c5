"""A shell script read as text, well enough for ``verifier_mode``'s regular expressions.

Not a shell parser: continuation lines are joined, comments dropped, here-document bodies set
apart (a program or a configuration file; a body fed to a shell stays a command), ``~`` and the
variables a script assigns a plain absolute path (``CONFIG="/etc/app.ini"``) expanded; quoted
strings can be emptied (``mask_quotes``) so that what they say is not read as a command.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

PATH = r"(?P<path>/[\w.@+~-][^\s;&|<>()'\"`]*)"
"""An absolute path in a script: what follows ``/`` up to a space, quote or shell operator."""

_HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)\s*(['\"]?)([A-Za-z_]\w*)\2")
_FED_TO_SHELL = re.compile(r"(?:^|[\s;&|(])(?:ba|da|z)?sh\b[^<]*$")
_ASSIGN = re.compile(
    r"(?:export\s+|local\s+|readonly\s+|declare\s+)?([A-Za-z_]\w*)=(['\"]?)(/[^'\"\s;&|$`]*)\2"
    r"\s*(?:#.*)?"
)
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")
_REDIRECT = re.compile(r"\d*(?:[<>]+|&>>?)&?")
_QUOTED = re.compile(
    r"(\b(?:ba|da|z)?sh\s+(?:-\w+\s+)*-c\s+|\bsu\b[^'\"\n]*\s-c\s+)?"
    r"('[^']*'|\"(?:[^\"\\]|\\.)*\")"
)


@dataclass(slots=True)
class Script:
    commands: list[str] = field(default_factory=list)
    """The lines the shell runs, variables expanded."""
    embedded: list[str] = field(default_factory=list)
    """The here-document bodies not fed to a shell (Python programs, configuration files)."""


def read_script(text: str) -> Script:
    """``text`` (a shell script) as its commands and its embedded documents."""
    text = re.sub(r"(?<![\w/])~(?=/)", "/root", text.replace("\\\n", " "))
    lines, script = text.splitlines(), Script()
    variables = {"HOME": "/root"}
    i = 0
    while i < len(lines):
        line, i = lines[i], i + 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        line = _VARIABLE.sub(lambda m: variables.get(m[1] or m[2], m[0]), line)
        script.commands.append(line)
        if m := _ASSIGN.fullmatch(line.strip()):
            variables[m[1]] = m[3]
        for doc in _HEREDOC.finditer(line):
            if _FED_TO_SHELL.search(line[: doc.start()]):
                continue  # `bash <<EOF`: its body is read as commands
            while i < len(lines):
                body, i = lines[i], i + 1
                if (body.lstrip("\t") if doc[1] else body).rstrip() == doc[3]:
                    break
                script.embedded.append(body)
    return script


def mask_quotes(line: str) -> str:
    """``line`` with its quoted strings emptied (a ``>`` in a sed expression or a message is no
    redirection), but for those that start with ``/`` (paths) and a shell's ``-c`` command."""

    def keep_or_empty(m: re.Match[str]) -> str:
        return m[0] if m[1] or m[2][1:2] == "/" else m[2][0] * 2

    return _QUOTED.sub(keep_or_empty, line)


def args_pattern(name: str = "args") -> str:
    """A command's arguments up to the next unquoted ``;``, ``&``, ``|`` or line end."""
    return rf"(?P<{name}>(?:[^;&|\n'\"]|'[^']*'|\"(?:[^\"\\]|\\.)*\")*)"


def words(args: str) -> list[str]:
    """The words of ``args`` (as the shell splits them, roughly), redirections left out."""
    try:
        split = shlex.split(args, comments=True)
    except ValueError:
        split = args.split()
    out: list[str] = []
    skip = False
    for w in split:
        if skip:
            skip = False
        elif m := _REDIRECT.match(w):
            skip = m.end() == len(w)  # `> file`: the file is the redirection's
        else:
            out.append(w)
    return out


def absolute_paths(text: str) -> list[str]:
    """The absolute paths ``text`` names (URLs and ``${VAR}/x`` left out)."""
    return [
        m["path"].rstrip(".,:")
        for m in re.finditer(rf"(?<![\w./$}}-]){PATH}", text)
        if not m["path"].startswith("//")
    ]
