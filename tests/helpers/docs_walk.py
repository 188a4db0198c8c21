"""The commands of README.md and the user guides, as a reader types them: extracted from the
docs' code blocks, each one classified (run in the default suite, run on a kept devnet by the
slow walk, or skipped with the reason), and run with bash in a scratch directory with the
project's .venv first on PATH. Used by tests/test_docs_walk.py and tests/e2e/test_docs_walk_slow.py.

A placeholder a doc leaves to the reader (`PORT0`, `0xJOB_HASH`, `0x…`) is filled from what the
doc says to read it from (`verillm devnet --keep`'s network.json, `verillm chain anvil`'s
printout, `verillm keys new`'s address); the tests pass those values, never constants.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[2]
VENV_BIN = Path(sys.executable).parent
WALKED_DOCS = ["README.md", "docs/sdk.md", "docs/operators.md", "docs/devnet.md", "docs/auditors.md",
               "docs/explorer.md", "docs/chain.md", "docs/vllm.md", "docs/benchmarks.md"]
SHELL_LANGS = {"bash", "sh", ""}


@dataclass(frozen=True)
class DocCommand:
    doc: str    # "docs/sdk.md"
    line: int   # where the command (or the python block) starts
    lang: str   # "bash" | "python" | "" (an untagged block of commands)
    text: str   # one shell command (continuation lines joined), or a whole python block
    block: int = 0  # the first line of its block

    @property
    def key(self) -> str:
        """The command without its trailing comment and with single spaces: what the plan names."""
        return " ".join(strip_comment(self.text).split()) if self.lang != "python" else self.text.splitlines()[0]

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.key}"


def strip_comment(command: str) -> str:
    """Cut a trailing `# comment` (a `#` after whitespace, outside quotes)."""
    quote = None
    for i, ch in enumerate(command):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or command[i - 1].isspace()):
            return command[:i].rstrip()
    return command.rstrip()


def extract_blocks(doc: str) -> list[tuple[int, str, str]]:
    """(line of the opening fence + 1, language, body) of every fenced block of ``doc``."""
    text = (ROOT / doc).read_text()
    return [(text[:m.start()].count("\n") + 2, m.group(1), m.group(2))
            for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def is_command_block(lang: str, body: str) -> bool:
    """A block a reader types: bash/sh, or an untagged block whose every line is a `verillm` command
    (untagged blocks are otherwise printouts: a replay report, the layout, a listing)."""
    if lang in ("bash", "sh"):
        return True
    lines = [line for line in body.splitlines() if line.strip()]
    return lang == "" and bool(lines) and all(line.startswith("verillm ") for line in lines)


def extract_commands(doc: str) -> list[DocCommand]:
    """Every command of ``doc``'s command blocks (comment-only lines dropped, `\\` continuations
    joined) and every python block whole."""
    found = []
    for start, lang, body in extract_blocks(doc):
        if lang == "python":
            found.append(DocCommand(doc, start, lang, body, start))
            continue
        if not is_command_block(lang, body):
            continue
        pending, first = "", 0
        for offset, line in enumerate(body.splitlines()):
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            first = first if pending else start + offset
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            found.append(DocCommand(doc, first, lang, pending + line, start))
            pending = ""
    return found


def all_commands() -> list[DocCommand]:
    return [command for doc in WALKED_DOCS for command in extract_commands(doc)]


def substitute(text: str, values: dict[str, str]) -> str:
    """Fill the doc's placeholders, longest first (so `0xJOB_HASH` wins over `0x…`)."""
    for placeholder in sorted(values, key=len, reverse=True):
        text = text.replace(placeholder, values[placeholder])
    return text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Shell:
    """Runs documented commands one after another in ``cwd`` as a reader's shell would: bash, the
    project's .venv first on PATH, `export`/`source` carried to the next command, `~` the scratch
    HOME (its ~/.cache the real one: SmolLM2's conversion is cached there)."""

    def __init__(self, cwd: Path):
        self.cwd = cwd
        self.cwd.mkdir(parents=True, exist_ok=True)
        home = cwd / "home"
        home.mkdir(exist_ok=True)
        for folder in ("ops", "tests"):  # the guides are read in a checkout: `cp ops/node.toml node.toml`
            if not (cwd / folder).exists():
                (cwd / folder).symlink_to(ROOT / folder)
        real_cache = Path.home() / ".cache"
        if not (home / ".cache").exists() and real_cache.exists():
            (home / ".cache").symlink_to(real_cache)
        self.env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "HOME": str(home), "OMP_NUM_THREADS": "1",
                    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VERILLM_CACHE_DIR": str(real_cache / "verillm")}
        self.daemons: list[tuple[str, subprocess.Popen, Path]] = []
        self.transcript: list[str] = []

    def run(self, command: str, expect: int = 0, timeout_s: float = 600) -> str:
        """Run one command; fail (AssertionError with its output) unless it exits ``expect``; return stdout+stderr."""
        env_file = self.cwd / ".env-after"
        script = f"{command}\n__rc=$?\nenv -0 > {env_file}\nexit $__rc\n"
        started = time.monotonic()
        done = subprocess.run(["bash", "-c", script], cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout_s)
        output = done.stdout + done.stderr
        self.transcript.append(f"$ {command}   # exit {done.returncode}, {time.monotonic() - started:.1f} s\n{output[-1500:]}")
        assert done.returncode == expect, f"`{command}` exited {done.returncode}, the doc says {expect}:\n{output[-4000:]}"
        if env_file.exists():
            self.env = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
        return output

    def start(self, command: str, ready: str, timeout_s: float = 600) -> str:
        """Start a long-running command (trailing `&` dropped) and wait until ``ready`` (a regex) shows
        in its output; return that output. It is stopped by `stop_all` (SIGTERM, as Ctrl-C would)."""
        log = self.cwd / f"daemon-{len(self.daemons)}.log"
        process = subprocess.Popen(["bash", "-c", f"exec {command.rstrip().rstrip('&')}"], cwd=self.cwd, env=self.env,
                                   stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        self.daemons.append((command, process, log))
        deadline = time.monotonic() + timeout_s
        while not re.search(ready, log.read_text()):
            assert process.poll() is None, f"`{command}` exited {process.returncode} before it was up:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"`{command}` not up after {timeout_s} s:\n{log.read_text()[-4000:]}"
            time.sleep(0.5)
        self.transcript.append(f"$ {command}   # up\n{log.read_text()[-1500:]}")
        return log.read_text()

    def stop_all(self) -> list[tuple[str, int]]:
        """SIGTERM every daemon this shell started (newest first); return (command, exit code)."""
        codes = []
        for command, process, _ in reversed(self.daemons):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            codes.append((command, process.returncode))
        self.daemons.clear()
        return codes


SNIPPET_RUNNER = '''
import ast, sys
namespace = {"__name__": "__main__"}
for path in sys.argv[1:]:
    where, first = open(path).readline()[2:].strip().rsplit(":", 1)
    source = open(path).read()
    print(f"--- {where}:{first}", flush=True)
    for node in ast.parse(source, path).body:  # a reader's REPL: every bare expression's value is shown
        line = f"{where}:{int(first) + node.lineno - 2}"
        if isinstance(node, ast.Expr):
            print(f"[{line}] {eval(compile(ast.Expression(node.value), path, 'eval'), namespace)!r}", flush=True)
        else:
            exec(compile(ast.Module([node], []), path, "exec"), namespace)
'''


def run_python(shell: Shell, blocks: list[DocCommand], values: dict[str, str], prelude: str = "") -> str:
    """Run python blocks in one interpreter, one namespace, in order (a reader pasting them into one
    session), the placeholders filled and ``prelude`` first (the names a doc leaves to its reader);
    every bare expression's value is printed as `[doc:line] repr`. Return the output."""
    files = []
    for n, block in enumerate(blocks):
        path = shell.cwd / f"snippet-{n}.py"
        # Line 1 names the doc line; the block starts on line 2, so a traceback's line - 1 is the doc's offset.
        path.write_text(f"# {block.doc}:{block.line}\n" + substitute(block.text, values))
        files.append(path)
    (shell.cwd / "snippet-runner.py").write_text(SNIPPET_RUNNER)
    if prelude:
        (shell.cwd / "snippet-prelude.py").write_text("# prelude:1\n" + prelude)
        files.insert(0, shell.cwd / "snippet-prelude.py")
    return shell.run("python snippet-runner.py " + " ".join(str(f.name) for f in files))


def compute_shown_output(command: DocCommand) -> list[str]:
    """The output a doc shows for ``command``: the comment-only lines right after it in its block
    (`# model id   0x…`), without the `# `, whitespace collapsed, elisions (`…`) and `<- notes` dropped."""
    lines = (ROOT / command.doc).read_text().splitlines()[command.line:]
    shown = []
    for line in lines:
        if not line.startswith("# "):
            break
        text = " ".join(line[2:].split("<-")[0].split())
        if text and text != "…":
            shown.append(text)
    return shown
