"""Imported once by the multiprocessing fork server (see pool.py): workers forked from it start with
sympy and math-verify imported and their lazily built parsers and regexes already warm, so a
worker killed for a timeout is replaced in milliseconds rather than half a second."""

from miles_reward import math_backend
from miles_reward.config import ANSWER_MODES

# The default mode last: math-verify keeps one compiled extraction regex set, the latest one used.
for _mode in reversed(ANSWER_MODES):
    math_backend.make_scorer(_mode)
