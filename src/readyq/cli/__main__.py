"""``python -m readyq.cli``: the ``readyq`` command."""

from __future__ import annotations

import sys

from readyq.cli.entry_point import main

sys.exit(main())
