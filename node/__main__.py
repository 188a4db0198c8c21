"""`python -m verillm.node run --config node.toml`: the same as `verillm node run`."""

import sys

import click

from verillm.errors import VerillmError
from verillm.cli.node import node

if __name__ == "__main__":
    try:
        node.main(prog_name="python -m verillm.node", standalone_mode=False)
    except VerillmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
