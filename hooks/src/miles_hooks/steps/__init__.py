"""The steps layer: one module (or package) per ``miles-hooks`` subcommand.

Each step is a plain function over a loaded run spec (``run``, or ``collect`` for the reporting
steps) that returns a JSON-able result or raises a :class:`~miles_hooks.core.errors.HookError`. Steps
never import one another: what two steps share lives in :mod:`miles_hooks.core`. The CLI
(:mod:`miles_hooks.cli`) is the only caller of a step's entry point.
"""
