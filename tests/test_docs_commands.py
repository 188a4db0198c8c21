"""The commands the docs tell a newcomer to type exist and carry their required options; no
doc says `npm ci` (npm 11 refuses it with this lock)."""

import re
from pathlib import Path

import click

from verillm.cli import cli

ROOT = Path(__file__).parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Where commands are written to be typed: the README (code and its table) and the code blocks of the role guides.
TYPED = {"README.md": "all", "operators.md": "code", "devnet.md": "code", "explorer.md": "code", "sdk.md": "code"}
# Options of which one must be given (click cannot say so): audit replay reads --node or --db.
ONE_OF = {("audit", "replay"): ("--node", "--db")}


def _commands(text: str, where: str) -> list[str]:
    """`verillm …` command lines in code blocks (and, for "all", in table cells), description columns cut off."""
    found = re.findall(r"^\s*(verillm [^\n#]+)", "\n".join(re.findall(r"```[a-z]*\n(.*?)```", text, re.S)), re.M)
    if where == "all":
        found += [c for row in text.splitlines() if row.startswith("|") for c in re.findall(r"`(verillm [^`]+)`", row)]
    return [re.split(r"\s{2,}", c.strip())[0] for c in found if "|" not in re.split(r"\s{2,}", c)[0]]


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    command, path, ctx = cli, [], click.Context(cli)
    for word in words:
        if not isinstance(command, click.Group) or word.startswith("-"):
            break
        sub = command.get_command(ctx, word)
        if sub is None:
            break
        command, path = sub, path + [word]
    return command, path


def test_every_documented_verillm_command_has_its_required_options():
    problems = []
    for doc in DOCS:
        if doc.name not in TYPED:
            continue
        for line in _commands(doc.read_text(), TYPED[doc.name]):
            words = line.split()[1:]
            command, path = _resolve(words)
            if isinstance(command, click.Group) or not path:
                continue
            given = set(words)
            for param in command.params:
                if isinstance(param, click.Option) and param.required and param.envvar is None and not given & set(param.opts):
                    problems.append(f"{doc.name}: `{line}` lacks {param.opts[0]}")
                if isinstance(param, click.Argument) and param.required and len(words) <= len(path):
                    problems.append(f"{doc.name}: `{line}` lacks {param.name.upper()}")
            one_of = ONE_OF.get(tuple(path))
            if one_of and not given & set(one_of):
                problems.append(f"{doc.name}: `{line}` needs one of {one_of}")
    assert problems == [], "\n".join(problems)


def test_no_doc_says_npm_ci():
    offenders = [f"{doc.name}:{n}" for doc in DOCS for n, line in enumerate(doc.read_text().splitlines(), 1)
                 if "npm ci" in line and "npm 11" not in line and "refuses" not in line and "fails" not in line]
    assert offenders == []
