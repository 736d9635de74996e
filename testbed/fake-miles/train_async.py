"""Testbed stand-in for miles' train_async.py (disaggregated runs): like train.py, refuses --colocate."""

import sys

import train

if __name__ == "__main__":
    if "--colocate" in sys.argv:
        print("train_async.py does not support --colocate (use train.py)", file=sys.stderr)
        sys.exit(2)
    sys.exit(train.main())
