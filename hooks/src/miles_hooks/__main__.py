"""``python -m miles_hooks`` is the same as the ``miles-hooks`` console script."""

import sys

from miles_hooks.cli import main

if __name__ == "__main__":
    sys.exit(main())
