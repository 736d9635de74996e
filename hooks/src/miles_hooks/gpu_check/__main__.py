"""``python -m miles_hooks.gpu_check [flags]``."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
