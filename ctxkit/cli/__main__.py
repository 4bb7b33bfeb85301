"""``python -m ctxkit.cli``: the ``ctxkit`` command."""

import sys

from ctxkit.cli import main

sys.exit(main())
