"""The contract tests (helpers live in contractlib.py, a name no other test tree uses)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
