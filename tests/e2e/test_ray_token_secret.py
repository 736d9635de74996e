"""Ray token authentication on the testbed (secrets.rayAuth).

With the default values preflight creates the token Secret itself (a hook pod, with the release's own
RBAC, against the real API server): once, with a random token that appears in no manifest, no Helm
release and no log, and never rewritten by an upgrade; the release's Ray head (a container on the real node)
runs with it and refuses a job without it. The install uses the key earlier chart versions generated
(`token`); the upgrade to the default key has preflight add KubeRay's `auth_token`, same value, and the
real KubeRay takes the cluster's `authOptions`. The other e2e installs name the testbed's token Secret through
values-local-testbed.yaml; only preflight of the hooks runs here (the lifecycle test covers the others).
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from typing import Any

import harness as tb
import pytest

pytestmark = pytest.mark.cluster

RELEASE = "tok"
VALUES = [tb.OVERLAY, tb.VALUES / "values-colocated.yaml"]
# preflight alone of the hooks: it is what creates the Secret (the others have their own tests)
GENERATED = [
    "--set", "secrets.rayAuth.existingSecret=",
    *(arg for step in ("prepareData", "convert", "convertCheck", "waitReady", "verify", "submit")
      for arg in ("--set", f"hooks.{step}.enabled=false")),
]  # fmt: skip
# the key preflight generated the token under before the chart declared it to KubeRay (authOptions)
EARLIER_KEY = ["--set", "secrets.rayAuth.key=token"]


def token_secret(ns: str) -> dict[str, Any]:
    return dict(tb.kget("secret", ns, f"{RELEASE}-miles-ray-auth"))


def head_ready(ns: str) -> bool:
    try:
        tb.ray_head(ns)
    except AssertionError:
        return False
    return True


def submit_status(ns: str, token: str | None) -> int | None:
    """The HTTP status the head's Jobs API answers a job submission with (None: no answer yet)."""
    req = tb.ray_request(ns, "/api/jobs/", "POST", token=token)
    req.data = b'{"entrypoint": "echo pwned"}'
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def head_pods(ns: str) -> list[dict[str, Any]]:
    return list(tb.kget("pods", ns, selector="ray.io/node-type=head")["items"])


def new_head(ns: str, before: set[str]) -> dict[str, Any] | None:
    """The head pod that replaced those in ``before``, once it is Ready and they are gone."""
    pods = head_pods(ns)
    if any(p["metadata"]["uid"] in before for p in pods):
        return None
    ready = [
        p
        for p in pods
        if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    ]
    return ready[0] if ready else None


def jobs_status(ns: str, token: str) -> int | None:
    try:
        with urllib.request.urlopen(tb.ray_request(ns, "/api/jobs/", token=token), timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def files_containing(text: str) -> list[str]:
    runner = tb.CLUSTER_DIR / "runner"
    return [str(p) for p in runner.rglob("*") if p.is_file() and text in p.read_text(errors="replace")]


def test_preflight_creates_the_ray_token_secret_once_and_shows_it_nowhere(namespace: str) -> None:
    ns = namespace
    assert tb.kubectl("-n", ns, "get", "secret", f"{RELEASE}-miles-ray-auth", check=False).rc != 0

    tb.deploy("helm4", "install", RELEASE, ns, VALUES, *GENERATED, *EARLIER_KEY)
    secret = token_secret(ns)
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) == 43, "expected 32 random bytes, URL-safe"
    assert secret["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "miles-hooks"

    # the Ray pods read it by reference; the value is in no manifest, release record or hook log
    (cluster,) = tb.kget("rayclusters.ray.io", ns)["items"]
    head_env = {
        e["name"]: e for e in cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert head_env["RAY_AUTH_MODE"]["value"] == "token"
    assert head_env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == f"{RELEASE}-miles-ray-auth"
    assert token not in tb.helm("helm4", "get", "all", RELEASE, "-n", ns).out
    assert (
        token not in tb.kubectl("get", "configmaps,rayclusters.ray.io,jobs,pods", "-n", ns, "-o", "yaml").out
    )
    assert files_containing(token) == []

    # the chart's head runs with it: a job without the token, or with another, is refused. Ready means the
    # raylet's agent answers (KubeRay's probe); the dashboard process may answer a little later.
    tb.wait_until("the release's Ray head to be Ready", lambda: head_ready(ns), timeout=300, interval=2)
    code = tb.wait_until("its dashboard to answer", lambda: submit_status(ns, None), timeout=180, interval=2)
    assert code == 401
    assert submit_status(ns, "not-the-token") == 403
    with urllib.request.urlopen(tb.ray_request(ns, "/api/jobs/", token=token), timeout=10) as r:
        assert r.status == 200
        assert b"echo pwned" not in r.read()

    assert "authOptions" not in cluster["spec"]  # a key KubeRay does not read: the pods' env alone

    # an upgrade keeps it: preflight never rewrites an existing token. Under the default key it adds KubeRay's
    # key beside the earlier one, the same value, and the RayCluster declares the Secret to KubeRay
    before = {p["metadata"]["uid"] for p in head_pods(ns)}
    tb.deploy("helm4", "upgrade", RELEASE, ns, VALUES, *GENERATED)
    kept = token_secret(ns)
    assert kept["metadata"]["uid"] == secret["metadata"]["uid"]
    assert {k: base64.b64decode(v).decode() for k, v in kept["data"].items()} == {
        "token": token,
        "auth_token": token,
    }
    (cluster,) = tb.kget("rayclusters.ray.io", ns)["items"]
    assert cluster["spec"]["authOptions"] == {"mode": "token", "secretName": f"{RELEASE}-miles-ray-auth"}
    # the real KubeRay accepts it and recreates the head, which takes the token from KubeRay's key
    head = tb.wait_until(
        "a recreated Ray head to be Ready", lambda: new_head(ns, before), timeout=300, interval=2
    )
    env = {e["name"]: e for e in head["spec"]["containers"][0]["env"]}
    assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "auth_token"
    code = tb.wait_until("its dashboard to answer", lambda: submit_status(ns, None), timeout=180, interval=2)
    assert code == 401
    assert jobs_status(ns, token) == 200

    # uninstall leaves it (documented), like a kept storage claim
    tb.helm("helm4", "uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "3m")
    assert token_secret(ns)["metadata"]["uid"] == secret["metadata"]["uid"]
    # the pre-phase right to create Secrets went with the pre hooks
    roles = tb.kubectl("-n", ns, "get", "roles", "-o", "name").out.split()
    assert f"role.rbac.authorization.k8s.io/{RELEASE}-miles-hooks-preflight" not in roles
