"""Imported once by the multiprocessing fork server (see pool.py): workers forked from it start with
sympy and math-verify imported and their lazily built parsers and regexes already warm, so a
worker killed for a timeout is replaced in milliseconds rather than half a second."""

from miles_reward import math_backend

math_backend.warm_up()
