"""The local testbed's Python parts (the shell scripts beside this package bring the testbed up and down).

Modules, each with one job:

- ``nodes``: the simulated (kwok) GPU and CPU nodes, as a Kubernetes List.
- ``kubelet_env``: a container's environment as the kubelet resolves it (``$(VAR)``, ConfigMap and Secret
  references), from any source of ConfigMap/Secret data.
- ``ray_workers``: one real Ray worker node per simulated KubeRay worker pod -- the one imitation of a
  kubelet the testbed keeps, since those pods need GPUs and land on kwok nodes.
- ``journal``: what the real node's hook containers ran, followed through the API server.
- ``runner``: the pod watch feeding both, and the API reads they need.
- ``pod_runner``: the command line that starts the runner (``python -m miles_testbed.pod_runner``).
"""
