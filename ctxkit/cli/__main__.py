"""``python -m ctxkit.cli``: the ``ctxkit`` command."""

import sys

from ctxkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
