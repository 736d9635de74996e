"""The core layer: what every step shares and nothing step-specific.

Errors and exit codes, logging, file helpers, the run spec (its types, loading and validation), the
Kubernetes client with its error translation, Kubernetes quantities, the RayCluster's health, the Ray
job helpers, the lock file, the shell lines of the model args and the training entrypoint, and the GPU
node checks (``core.gpu``, used by both ``gpu-check`` and ``verify``). Modules here never import a step
or the CLI; import-linter checks that (``make lint-python``).
"""
