"""The e2e harness: helpers for the end-to-end tests and benchmarks on the local testbed (testbed/)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_race
import yaml
from miles_testbed import ray_workers  # the Ray node labels of the testbed's local Ray workers

REPO = Path(__file__).resolve().parents[2]
TOOLS_BIN = REPO / ".tools" / "bin"
CLUSTER_DIR = Path(os.environ.get("CLUSTER_DIR") or REPO / ".tools" / "cluster")
KUBECONFIG = CLUSTER_DIR / "kubeconfig"
CHART = REPO / "charts" / "miles"
VALUES = REPO / "values"
OVERLAY = VALUES / "values-local-testbed.yaml"
FSX_DIR = Path(os.environ.get("FSX_DIR") or "/tmp/miles-testbed-fsx")
STORAGE_MOUNT = os.environ.get("STORAGE_MOUNT_PATH") or "/fsx"  # the scenarios' storage.mountPath
REAL_NODE = os.environ.get("REAL_NODE_NAME", "real-cpu-0")  # testbed/node.sh: where the Ray heads run
# the token up.sh made, which storage.sh puts in every namespace as the Secret the overlay names
RAY_TOKEN_FILE = CLUSTER_DIR / "ray-auth-token"
JOURNAL = CLUSTER_DIR / "runner" / "journal.jsonl"
HOOK_ORDER = ["preflight", "prepare-data", "convert", "wait-ready", "verify", "submit"]


class CommandFailedError(AssertionError):
    pass


@dataclass
class Result:
    rc: int
    out: str
    err: str
    seconds: float


def tool_env() -> dict[str, str]:
    """The environment the tools run with: the testbed's kubeconfig, .tools/bin and the .venv first."""
    return dict(
        os.environ,
        KUBECONFIG=str(KUBECONFIG),
        PATH=f"{TOOLS_BIN}:{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
    )


def run(
    argv: list[str],
    check: bool = True,
    timeout: float = 900,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    *,
    cwd: Path = REPO,
) -> Result:
    full_env = {**tool_env(), **(env or {})}
    t0 = time.monotonic()
    p = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
        check=False,
        input=stdin,
    )
    res = Result(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)
    if check and p.returncode != 0:
        raise CommandFailedError(
            f"{' '.join(argv)} exited {p.returncode}\n--- stdout\n{p.stdout[-4000:]}\n"
            f"--- stderr\n{p.stderr[-4000:]}"
        )
    return res


def kubectl(*args: str, check: bool = True, timeout: float = 120) -> Result:
    return run([str(TOOLS_BIN / "kubectl"), *args], check=check, timeout=timeout)


def kubectl_apply(manifests: str) -> Result:
    return run([str(TOOLS_BIN / "kubectl"), "apply", "-f", "-"], stdin=manifests)


def kget(kind: str, ns: str | None = None, name: str | None = None, selector: str | None = None) -> Any:
    args = ["get", kind, "-o", "json"]
    if name:
        args.insert(2, name)
    if ns:
        args += ["-n", ns]
    if selector:
        args += ["-l", selector]
    return json.loads(kubectl(*args).out)


def helm(version: str, *args: str, check: bool = True, timeout: float = 900) -> Result:
    return run([str(TOOLS_BIN / version), *args], check=check, timeout=timeout)


# What the overlay sizes for the real node (2 cores, shared with the whole testbed), by values path
REAL_NODE_SIZES = (
    ("hooks", "convert", "resources"),
    ("hooks", "convert", "shmSize"),
    ("hooks", "export", "resources"),
    ("rayCluster", "head", "resources"),
    ("reward", "resources"),
)


def real_node_sizes(values: list[Path]) -> list[str]:
    """``--set-json`` arguments giving the overlay's real-node sizes back where a value file after it sets
    them: a scenario's production size (the MoE converter's 32 CPUs and 1000Gi) would leave its pod Pending
    on the real node, and only the size differs from what the scenario ships."""
    if OVERLAY not in values:
        return []
    overlay = yaml.safe_load(OVERLAY.read_text())
    later = [yaml.safe_load(p.read_text()) or {} for p in values[values.index(OVERLAY) + 1 :]]

    def lookup(doc: Any, path: tuple[str, ...]) -> Any:
        for key in path:
            if not isinstance(doc, dict) or key not in doc:
                return None
            doc = doc[key]
        return doc

    return [
        arg
        for path in REAL_NODE_SIZES
        if any(lookup(doc, path) is not None for doc in later)
        for arg in ("--set-json", f"{'.'.join(path)}={json.dumps(lookup(overlay, path))}")
    ]


def deploy_argv(
    version: str, verb: str, release: str, namespace: str, values: list[Path], *extra: str
) -> list[str]:
    """helm install/upgrade of the chart with the value files in order (the overlay's real-node sizes kept,
    real_node_sizes), waiting as a user would; Helm 4 with --debug, whose log tells its hook status race
    (below) from a failed hook."""
    files = [arg for path in values for arg in ("-f", str(path))]
    sizes = real_node_sizes(values)
    chart = [str(CHART), "-n", namespace, *files, *sizes, *extra, "--wait", "--timeout", "8m"]
    debug = ["--debug"] if version == "helm4" else []
    return [str(TOOLS_BIN / version), verb, release, *chart, *debug]


def helm4_stale_hook_status(output: str) -> str | None:
    """The Job ("namespace/name") when the output shows the race (stale_hook_job) and the API server holds
    the Job Complete; None for any other failure."""
    found = helm_race.stale_hook_job(output)
    if not found:
        return None
    ns, name = found
    job = kubectl("get", "job", name, "-n", ns, "-o", "json", check=False)
    if job.rc != 0:
        return None
    conditions = json.loads(job.out).get("status", {}).get("conditions", [])
    if not any(c["type"] == "Complete" and c["status"] == "True" for c in conditions):
        return None
    return f"{ns}/{name}"


class Background:
    """A command run in the background, its output (stdout and stderr) going to a file: a pipe nobody reads
    until the end fills at 64 KiB and stops the command there (Helm 4's --debug log is larger)."""

    def __init__(self, argv: list[str]) -> None:
        # an unnamed file, gone with this object: the output is read as often as the test asks
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv, env=tool_env(), cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT, text=True
        )

    def running(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def finish(self, timeout: float) -> tuple[int, str]:
        """Waits for the command: (exit status, output)."""
        rc = self.proc.wait(timeout=timeout)
        return rc, self.output()

    def stop(self) -> str:
        """Kills the command if it still runs; its output."""
        if self.running():
            self.proc.kill()
            self.proc.wait(timeout=60)
        return self.output()


def after_status_race(argv: list[str], rc: int, output: str) -> tuple[int, str]:
    """(rc, output) of a finished deploy_argv command; when Helm 4 failed it on the status race above, those
    of `helm upgrade` with the same arguments, run again as a user would (every hook is idempotent, submit
    never submits twice)."""
    raced = helm4_stale_hook_status(output) if rc != 0 and Path(argv[0]).name == "helm4" else None
    if not raced:
        return rc, output
    sys.stderr.write(f"Helm 4 failed hook Job {raced} although it completed (status race): upgrading\n")
    res = run([argv[0], "upgrade", *argv[2:]], check=False)
    return res.rc, res.out + res.err


def deploy(version: str, verb: str, release: str, namespace: str, values: list[Path], *extra: str) -> None:
    argv = deploy_argv(version, verb, release, namespace, values, *extra)
    res = run(argv, check=False)
    rc, out = after_status_race(argv, res.rc, res.out + res.err)
    if rc != 0:
        raise CommandFailedError(f"helm {verb} {release} exited {rc}\n{out[-8000:]}")


def rollback(version: str, release: str, namespace: str, revision: int) -> None:
    """helm rollback to ``revision``, waiting as a user would (its post-rollback hooks included); run
    again when Helm 4 failed it on the status race (helm4_stale_hook_status), as a user would."""
    debug = ["--debug"] if version == "helm4" else []
    argv = [str(TOOLS_BIN / version), "rollback", release, str(revision), "-n", namespace]
    argv += ["--wait", "--timeout", "8m", *debug]
    res = run(argv, check=False)
    out = res.out + res.err
    if res.rc != 0 and version == "helm4" and helm4_stale_hook_status(out):
        res = run(argv, check=False)
        out = res.out + res.err
    if res.rc != 0:
        raise CommandFailedError(f"helm rollback {release} {revision} exited {res.rc}\n{out[-8000:]}")


def uninstall_cleanly(version: str, release: str, namespace: str, leftovers: Any) -> None:
    """helm uninstall, then wait until leftovers(release, namespace) lists nothing of the release."""
    helm(version, "uninstall", release, "-n", namespace, "--wait", "--timeout", "3m")
    wait_until("no object of the release left", lambda: not leftovers(release, namespace), timeout=60)


def dead_processes() -> list[str]:
    """The testbed processes (testbed's pid files: control plane, kwok, runner, the real node's kubelet,
    containerd, kube-proxy) that no longer run, each with the tail of its log."""
    dead = []
    for pid_file in sorted((CLUSTER_DIR / "run").glob("*.pid")):
        pid, _, started = pid_file.read_text().strip().partition(" ")
        try:
            alive = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19] == started
        except (OSError, IndexError):
            alive = False
        if not alive:
            log = CLUSTER_DIR / "logs" / f"{pid_file.stem}.log"
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else "(no log)"
            dead.append(f"{pid_file.stem} (log {log}):\n{tail}")
    return dead


def is_up() -> bool:
    if not KUBECONFIG.exists():
        return False
    return kubectl("get", "--raw", "/readyz", check=False, timeout=10).rc == 0


def up(nodes: int | None = None) -> float:
    env = {"NODES": str(nodes)} if nodes is not None else {}
    res = run([str(REPO / "testbed" / "up.sh")], env=env, timeout=300)
    sys.stderr.write(res.out[-2000:])
    return float((CLUSTER_DIR / "last-up-seconds").read_text().strip())


def down() -> None:
    run([str(REPO / "testbed" / "down.sh")], timeout=120)


def journal(namespace: str | None = None, since: float = 0.0) -> list[dict[str, Any]]:
    if not JOURNAL.exists():
        return []
    out = []
    for line in JOURNAL.read_text().splitlines():
        e = json.loads(line)
        if (namespace is None or e["namespace"] == namespace) and e["start"] >= since:
            out.append(e)
    return out


def audit_events(namespace: str, service_account: str) -> list[dict[str, Any]]:
    """The API server's audit events (testbed/manifests/audit-policy.yaml) of requests made with this
    ServiceAccount's tokens: each names the pod its bound token belongs to."""
    user = f"system:serviceaccount:{namespace}:{service_account}"
    path = CLUSTER_DIR / "logs" / "audit.log"
    events = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [e for e in events if (e.get("user") or {}).get("username") == user]


def check_hooks_api_use(namespace: str, callers_allowed: set[str]) -> set[str]:
    """Per the audit log: the hooks' account was never refused (each step holds what it calls), and only
    the pods in ``callers_allowed`` (the steps given an API token) called the API at all; returns those
    that did."""
    events = audit_events(namespace, "miles-hooks")
    assert events, "no audit event of the hooks' account"
    refused = {
        f"{e['verb']} {e.get('requestURI')}"
        for e in events
        if (e.get("responseStatus") or {}).get("code") == 403
    }
    # by design: a cluster-wide pod read is not granted, so preflight's KubeRay-operator look is a note
    operator_probe = "list /api/v1/pods?labelSelector=app.kubernetes.io/name%3Dkuberay-operator&limit=50"
    assert refused <= {operator_probe}, refused
    pods = {
        p
        for e in events
        for p in (e["user"].get("extra") or {}).get("authentication.kubernetes.io/pod-name", [])
    }
    callers = {p.rsplit("-", 1)[0] if not p.startswith("miles-test-") else p for p in pods}
    assert callers <= callers_allowed, callers
    return callers


def hook_steps(entries: list[dict[str, Any]]) -> list[str]:
    """The miles-hooks step each journal entry ran (main containers only), in start order."""
    steps = []
    for e in sorted(entries, key=lambda e: e["start"]):
        argv = e["argv"]
        for i, a in enumerate(argv):
            if a in [*HOOK_ORDER, "status"] and (
                i > 0 and ("miles-hooks" in argv[i - 1] or argv[i - 1] == "miles_hooks")
            ):
                steps.append(a)
                break
    return steps


def ray_head(namespace: str) -> str:
    """The address of the namespace's Ray head: its head pod on the real node that is Ready and not being
    deleted (the newest, while a replaced one is still there); this machine routes to the node's pods."""
    pods = [
        p
        for p in kget("pods", namespace, selector="ray.io/node-type=head")["items"]
        if not p["metadata"].get("deletionTimestamp")
        and p["status"].get("podIP")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    ]
    assert pods, f"no Ready Ray head pod in namespace {namespace}"
    newest = max(pods, key=lambda p: p["metadata"]["creationTimestamp"])
    return str(newest["status"]["podIP"])


def ray_request(
    namespace: str, path: str, method: str = "GET", token: str | None = "testbed"
) -> urllib.request.Request:
    """A request to the dashboard of the namespace's Ray head; by default with the testbed's token (which
    the overlay's releases use), token=None: without one."""
    req = urllib.request.Request(f"http://{ray_head(namespace)}:8265{path}", method=method)
    if token == "testbed":
        token = RAY_TOKEN_FILE.read_text().strip()
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    return req


def ray_jobs(namespace: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(ray_request(namespace, "/api/jobs/"), timeout=10) as r:
        return list(json.loads(r.read()))


def ray_nodes(namespace: str) -> list[dict[str, Any]]:
    """Ray's node table (state API) of the namespace's head: node_id, state, resources_total, ..."""
    with urllib.request.urlopen(ray_request(namespace, "/api/v0/nodes?limit=1000"), timeout=10) as r:
        return list(json.loads(r.read())["data"]["result"]["result"])


def alive_ray_workers(namespace: str) -> list[str]:
    """The local Ray worker nodes (``ray start`` processes the pod runner started) still running for
    ``namespace``'s pods, as "namespace/pod" names: found by the pod their ``--labels`` name."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"start" not in argv:
            continue
        for arg in argv:
            if arg.startswith(b"--labels="):
                labels = json.loads(arg.removeprefix(b"--labels="))
                if labels.get(ray_workers.NODE_LABEL_NAMESPACE) == namespace:
                    found.append(f"{namespace}/{labels.get(ray_workers.NODE_LABEL_POD)}")
    return sorted(set(found))


def release_jobs(release: str, namespace: str) -> list[dict[str, Any]]:
    return [
        j
        for j in ray_jobs(namespace)
        if (j.get("metadata") or {}).get("miles.release") == release
        and (j.get("metadata") or {}).get("miles.namespace") == namespace
    ]


def wait_for_no_ray_workers(namespace: str, timeout: float) -> None:
    """Wait until no local Ray worker of ``namespace``'s pods runs; else fail naming them."""
    deadline = time.monotonic() + timeout
    while left := alive_ray_workers(namespace):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"local Ray workers still running {timeout:.0f}s after their pods should have gone: {left} "
                f"(the pod runner's log: {CLUSTER_DIR / 'logs' / 'pod-runner.log'})"
            )
        time.sleep(0.5)


def wait_until(what: str, fn: Any, timeout: float = 60, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def on_shared_storage(argv: list[str]) -> list[str]:
    """``argv`` run where the pods see the shared storage: in a private mount namespace with $FSX_DIR bound
    at the storage mount path (up.sh made the mount point), so the run spec's paths resolve as in a pod."""
    bind = f"mount --bind {shlex.quote(str(FSX_DIR))} {shlex.quote(STORAGE_MOUNT)}"
    script = bind + ' && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "--", "bash", "-c", script, "pod", *argv]


def host_path(pod_path: str) -> Path:
    """Where a path on the shared storage, as the pods see it (``/fsx/...``), is on this host."""
    rest = Path(pod_path).relative_to(STORAGE_MOUNT)
    return FSX_DIR / rest


def pod_path(host: Path) -> str:
    """Where a path under $FSX_DIR on this host is for the pods (``/fsx/...``)."""
    return str(Path(STORAGE_MOUNT) / host.relative_to(FSX_DIR))


def publish_converted(raw: dict[str, Any]) -> None:
    """seed.publish_converted for this run spec, run where the pods see the shared storage: the markers it
    writes name the paths the hooks read (a marker naming $FSX_DIR would not match theirs)."""
    path = CLUSTER_DIR / f"seed-spec-{os.getpid()}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(raw))
    try:
        run(
            on_shared_storage(
                [sys.executable, str(REPO / "tests" / "e2e" / "seed.py"), "--publish-spec", str(path)]
            )
        )
    finally:
        path.unlink()


def run_spec(namespace: str, fullname: str) -> dict[str, Any]:
    """The run spec the release's ConfigMap holds (what the hook pods mount)."""
    cm = kget("configmap", namespace, f"{fullname}-run")
    return dict(json.loads(cm["data"]["run.json"]))


def rendered_spec(
    values: list[Path], release: str, namespace: str, extra: list[str] | None = None
) -> dict[str, Any]:
    """The run spec `helm template` renders for these values."""
    args = ["template", release, str(CHART), "-n", namespace]
    for v in values:
        args += ["-f", str(v)]
    out = helm("helm", *args, *(extra or [])).out
    m = re.search(r"run\.json: \|-?\n((?:    .*\n|\n)+)", out)
    assert m, "no run.json in the rendered chart"
    return dict(json.loads("\n".join(line[4:] for line in m.group(1).splitlines())))
