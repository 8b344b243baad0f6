"""``python -m readyq``: the ``readyq`` command."""

from __future__ import annotations

import sys

from readyq.cli import main

sys.exit(main())
