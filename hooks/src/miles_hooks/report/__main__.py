"""``python -m miles_hooks.report`` (same as ``miles-hooks report``)."""

from miles_hooks.report import main

raise SystemExit(main())
