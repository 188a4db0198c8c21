"""Issue 36: every CLI call paid 17–33 s of imports on a loaded machine before its first line.
`verillm --help` lists its commands without importing them, and `verillm complete` does not load
web3 (nor torch); the listed help stays each command's own."""

import subprocess
import sys

import pytest

from verillm.cli import SHORT_HELP, SUBCOMMANDS, import_command

HEAVY = ("torch", "web3", "eth_account", "transformers")


def _modules_after(argv: list[str]) -> set[str]:
    code = ("import sys\nfrom verillm.cli import cli\ntry:\n    cli.main(%r, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "print('\\n'.join(sys.modules))" % (argv,))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return set(result.stdout.split())


def test_the_listed_help_is_each_commands_own():
    assert set(SHORT_HELP) == set(SUBCOMMANDS)
    for name, target in SUBCOMMANDS.items():
        assert import_command(target).get_short_help_str(limit=500) == SHORT_HELP[name], name


@pytest.mark.parametrize("argv", [["--help"], ["complete", "--help"]])
def test_help_and_complete_import_no_heavy_package(argv):
    loaded = _modules_after(argv)
    assert not [name for name in HEAVY if name in loaded], argv


def test_a_command_that_loaded_torch_exits_without_the_interpreters_teardown(tmp_path):
    """`audit replay` went on 32-80 s after its report: with torch loaded, the CLI exits as soon as
    its output is flushed (an atexit hook, run only by a full teardown, never runs) and keeps its code."""
    marker = tmp_path / "teardown-ran"
    code = ("import atexit, sys, torch\n"
            f"atexit.register(lambda: open({str(marker)!r}, 'w').close())\n"
            "sys.argv = ['verillm', 'chain', 'mine', '--rpc-url', 'http://127.0.0.1:1', '--blocks', '1', '--to-block', '2']\n"
            "print('the report')\n"
            "from verillm.cli import main\nmain()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "exactly one of" in result.stderr  # a usage error keeps click's code
    assert result.stdout == "the report\n" and not marker.exists()
