"""miles_hooks: the Helm-hook steps that deploy miles GRPO post-training on Kubernetes.

Importing this package is cheap on purpose: it pulls in only the standard library. The steps import
``kubernetes``, ``ray`` and ``huggingface_hub`` lazily, so ``convert`` and ``gpu-check`` run inside the
miles image, which has none of our pins.
"""

__version__ = "0.1.0"

SCHEMA_VERSION = 3
