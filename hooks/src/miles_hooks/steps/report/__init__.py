"""report: the run's health from what it wrote to the shared volume .

Reads ``output.provenanceFile`` (written by ``submit``), the checkpoint tree under
``output.checkpointDir`` and the TensorBoard event files under ``output.tensorboardDir``; prints a
summary table and a verdict with reasons (healthy, degenerate, stalled, not-started; see
:mod:`miles_hooks.steps.report.verdict`), checks free space against the next checkpoint
(:mod:`miles_hooks.steps.report.space`) and optionally draws reward and repetition over
rollouts as a PNG.

Exit codes (through ``miles-hooks report``): 0 ok; 1 when a finding of a kind named in ``--fail-on``
is present (default ``degenerate,stalled``); 2 bad spec or argument; 3 the volume did not answer within
``--timeout``. Nothing here contacts Ray or Kubernetes; ``tensorboard`` and ``matplotlib`` are
imported only while reading events and drawing.

Modules: ``build`` (collect the report, the ``--fail-on`` rule), ``provenance``, ``checkpoints``,
``events`` (TensorBoard), ``space``, ``verdict`` (pure: healthy / degenerate / stalled / not-started),
``output`` (table and plot) and ``deadline`` (the ``--timeout`` budget).
"""

from miles_hooks.steps.report.build import DEFAULT_FAIL_ON, DEFAULT_TIMEOUT, check, collect, parse_fail_on
from miles_hooks.steps.report.output import render

__all__ = ["DEFAULT_FAIL_ON", "DEFAULT_TIMEOUT", "check", "collect", "parse_fail_on", "render"]
