"""Load test of the chart's reward plugin: miles' real ``async_rm`` with ``--custom-rm-path`` set to
charts/miles/files/k8s_remote_rm.py, against the reward service, at a run's full concurrency.

A rollout has at most rollout_batch_size x n_samples_per_prompt samples waiting for a reward at once
(256 here). Samples are offered open loop at ``--load`` times the service's measured ``/score`` peak
(more than it can score), each waiting for one of the 256 slots as a rollout's samples would, for
``--seconds``; half-way through the service gets SIGTERM and a new one starts on the same port (a pod
rollout). Every reward is checked against the in-process loop's score for that sample. Then a shorter
run against a service whose REWARD_MAX_INFLIGHT is below the concurrency shows what overload costs.

Needs the miles contract venv (``make tools``; MILES_CONTRACT_PYTHON overrides where it is) and
vegeta for the peak (bench.py builds it). ``bench.py`` runs this after its own phases, reusing its peak;
alone:

    python tests/bench/reward/remote_rm_bench.py [--corpus FILE] [--peak REQ_PER_S] [--tag NAME]

Writes tests/bench/results/reward-remote-rm-<tag>.{json,md}. Exit status 1 when a sample failed or
got a wrong reward.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from miles_reward.config import ANSWER_MODES, default_workers

from bench import RESULTS, ROOT, LoopRunner, Service, Vegeta, closed_loop_peak, loadavg, uptime, vegeta_binary

sys.path.insert(0, str(ROOT / "tests" / "contract"))
from remote_rm_lib import Driver, contract_python, refuses_connections

HERE = Path(__file__).resolve().parent
CONCURRENCY = 256  # rollout_batch_size 32 x n_samples_per_prompt 8, the bench's run
UNDERSIZED_MAX_INFLIGHT = 64


@dataclass(frozen=True)
class ServiceConfig:
    workers: int
    timeout: float
    max_inflight: int
    answer: str

    def start(self, log: Path, port: int = 0) -> Service:
        return Service(self.workers, self.timeout, self.max_inflight, self.answer, log, port=port)


def wait_for(what: str, ready: Any, timeout: float) -> float:
    """Seconds until ``ready()`` held; raises naming ``what`` after ``timeout``."""
    t0 = time.monotonic()
    while not ready():
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{what}: not seen within {timeout:g}s")
        time.sleep(0.01)
    return time.monotonic() - t0


def load_run(
    python: Path,
    samples: list[dict[str, Any]],
    config: ServiceConfig,
    work: Path,
    *,
    rate: float,
    seconds: float,
    concurrency: int,
    restart: bool,
) -> dict[str, Any]:
    """One open-loop run through the driver; with ``restart``, SIGTERM and a new service half-way."""
    svc = config.start(work / f"service-{config.max_inflight}-a.log")
    doc = {
        "rm_url": svc.url("/score"),
        "mode": "plugin",
        "samples": samples,
        "concurrency": concurrency,
        "rate": rate,
        "duration": seconds,
        "progress_every": 0.25,
    }
    driver = Driver(python, doc)
    restart_report: dict[str, Any] | None = None
    services = [svc]
    try:
        if restart:
            wait_for(
                "the load half-way",
                lambda: driver.progress.get("elapsed_s", 0) >= seconds / 2 or driver.proc.poll() is not None,
                seconds + 120,
            )
            before = driver.progress
            t0 = time.monotonic()
            svc.proc.send_signal(signal.SIGTERM)
            closed = wait_for("the listener closed", lambda: refuses_connections(svc.port), 30)
            fresh = config.start(work / f"service-{config.max_inflight}-b.log", svc.port)
            ready = time.monotonic() - t0
            services.append(fresh)
            code = svc.proc.wait(60)
            restart_report = {
                "at_driver_s": before.get("elapsed_s"),
                "done_before": before.get("done"),
                "listener_closed_after_s": round(closed, 3),
                "new_service_ready_after_s": round(ready, 3),
                "old_service_exited_after_s": round(time.monotonic() - t0, 3),
                "old_service_exit_code": code,
            }
        result = driver.wait(seconds + 300)
        outcomes = Counter[str]()
        last = services[-1]
        for line in _metric_lines(last, "reward_requests_total"):
            outcomes[line[0]] += int(line[1])
    finally:
        driver.stop()
        for s in services:
            if s.proc.poll() is None:
                s.stop()
    result.pop("rewards", None)
    return {
        "service": services[0].config,
        "offered_per_s": round(rate, 1),
        "seconds": seconds,
        "concurrency": concurrency,
        "restart": restart_report,
        "last_service_requests": dict(outcomes),
        "driver": result,
    }


def _metric_lines(svc: Service, name: str) -> list[tuple[str, float]]:
    """(outcome label, value) of each ``name`` series in /metrics."""
    from bench import http_call

    text = http_call(svc.port, "GET", "/metrics")[1].decode()
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") and 'outcome="' in line:
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            out.append((outcome, float(line.rsplit(" ", 1)[1])))
    return out


def measure_peak(config: ServiceConfig, rows: list[dict[str, Any]], work: Path, seconds: float) -> float:
    """The service's /score peak, closed loop, as bench.py phase 3 measures it."""
    svc = config.start(work / "service-peak.log")
    try:
        veg = Vegeta(vegeta_binary(), work)
        body = [
            (
                svc.url(f"/score?i={i}"),
                json.dumps({"prompt": r["prompt"], "response": r["response"], "label": r["label"]}).encode(),
            )
            for i, r in enumerate(rows)
        ]
        targets = veg.targets("single", body)
        concurrencies = (2 * config.workers, 4 * config.workers)
        _, best, _ = closed_loop_peak(veg, svc, "score", targets, concurrencies=concurrencies, seconds=seconds)
        return best.ok_per_s()
    finally:
        svc.stop()


def run(
    rows: list[dict[str, Any]],
    expected: dict[int, float | str],
    config: ServiceConfig,
    *,
    peak: float,
    load: float,
    seconds: float,
    concurrency: int = CONCURRENCY,
    undersized_max_inflight: int = UNDERSIZED_MAX_INFLIGHT,
) -> dict[str, Any]:
    python = contract_python()
    if python is None:
        raise RuntimeError("no miles contract venv: run `make tools` (or set MILES_CONTRACT_PYTHON)")
    samples = [
        {"prompt": r["prompt"], "response": r["response"], "label": r["label"], "expected": expected[i]}
        for i, r in enumerate(rows)
    ]
    work = Path(tempfile.mkdtemp(prefix="reward-remote-rm-"))
    report: dict[str, Any] = {
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {
            "cpus_usable": len(os.sched_getaffinity(0)),
            "python": platform.python_version(),
            "uptime_before": uptime(),
        },
        "corpus_samples": len(rows),
        "expected_scores": dict(Counter(str(v) for v in expected.values())),
        "peak_per_s": round(peak, 1),
        "load": load,
        "contract_python": str(python),
    }
    try:
        print(
            f"[remote_rm] chart config, {concurrency} in flight at {load:g}x peak, restart half-way", flush=True
        )
        report["chart"] = load_run(
            python,
            samples,
            config,
            work,
            rate=load * peak,
            seconds=seconds,
            concurrency=concurrency,
            restart=True,
        )
        if undersized_max_inflight:
            small = ServiceConfig(config.workers, config.timeout, undersized_max_inflight, config.answer)
            print(f"[remote_rm] REWARD_MAX_INFLIGHT={undersized_max_inflight} (undersized)", flush=True)
            report["undersized"] = load_run(
                python,
                samples,
                small,
                work,
                rate=load * peak,
                seconds=seconds / 2,
                concurrency=concurrency,
                restart=False,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["host"]["uptime_after"] = uptime()
    report["host"]["loadavg_after"] = loadavg()
    report["met"] = all(
        report[k]["driver"]["failed"] == 0
        and report[k]["driver"]["wrong"] == 0
        and report[k]["driver"]["ok"] == report[k]["driver"]["sent"]
        for k in ("chart", "undersized")
        if k in report
    )
    return report


def write(report: dict[str, Any], tag: str, out_dir: Path = RESULTS) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"reward-remote-rm-{tag}.json").write_text(json.dumps(report, indent=2) + "\n")
    md = out_dir / f"reward-remote-rm-{tag}.md"
    md.write_text(markdown(report))
    return md


def _row(name: str, r: dict[str, Any]) -> str:
    d = r["driver"]
    p = d["plugin"] or {}
    lat = d["latency_ms"]
    return (
        f"| {name} | {r['service']['REWARD_WORKERS']} workers, REWARD_MAX_INFLIGHT="
        f"{r['service']['REWARD_MAX_INFLIGHT']} | {r['offered_per_s']:.0f}/s for {r['seconds']:g} s, "
        f"{r['concurrency']} in flight | {d['sent']} | {d['ok']} | **{d['failed']}** | **{d['wrong']}** | "
        f"{p.get('retries')} ({', '.join(f'{k} {v}' for k, v in p.get('reasons', {}).items()) or '-'}); "
        f"{p.get('scored_after_retry')} samples | {d['scored_per_s']:.0f}/s | {lat['p50']} | {lat['p99']} | "
        f"{lat['max']} | {d['max_lag_s']} s; {d['backlog_at_end']} due and unsent at the end |"
    )


def markdown(r: dict[str, Any]) -> str:
    lines = [
        f"# Reward plugin under load — {r['started_utc']}",
        "",
        "miles' real `miles.rollout.rm_hub.async_rm` (miles-rl 0.0.2, contract venv) with `custom_rm_path` "
        "= the chart's `charts/miles/files/k8s_remote_rm.py`, against the reward service on loopback.",
        "",
        f"- host: {r['host']['cpus_usable']} usable CPUs shared by the service and the client (one Python "
        f"process running async_rm); Python {r['host']['python']}",
        f"- `uptime` before: `{r['host']['uptime_before']}`; after: `{r['host']['uptime_after']}`",
        f"- corpus: `{r.get('corpus')}`, {r['corpus_samples']} samples cycled, expected scores "
        f"{r['expected_scores']} (in-process loop)",
        f"- the service's `/score` peak (vegeta, closed loop): {r['peak_per_s']:.0f} req/s; offered "
        f"{r['load']:g}x that, open loop, each sample waiting for one of the in-flight slots",
        "- the chart ships 2 replicas of 4 CPUs (8 workers each, REWARD_MAX_INFLIGHT 512 each); this machine "
        "has 2 CPUs, so one replica with the service's default workers for 2 CPUs stands in for them",
        "",
        "| run | service | offered | sent | scored | failed | wrong | retries (reasons); samples retried |"
        " scored/s | p50 ms | p99 ms | max ms | client backlog: longest wait for a slot; left at the end |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        _row("chart config, SIGTERM + new service half-way", r["chart"]),
    ]
    if "undersized" in r:
        lines.append(_row("undersized REWARD_MAX_INFLIGHT, no restart", r["undersized"]))
    rs = r["chart"]["restart"]
    if rs:
        lines += [
            "",
            f"Restart: SIGTERM at {rs['at_driver_s']} s ({rs['done_before']} samples done); the old listener "
            f"closed after {rs['listener_closed_after_s']} s, the new service was ready "
            f"{rs['new_service_ready_after_s']} s after the SIGTERM, and the old one had drained and exited "
            f"(code {rs['old_service_exit_code']}) by {rs['old_service_exited_after_s']} s.",
        ]
    errors = {
        k: r[k]["driver"]["errors"] for k in ("chart", "undersized") if k in r and r[k]["driver"]["errors"]
    }
    lines += ["", f"Verdict: {'every sample scored, every reward right' if r['met'] else 'FAILED'}."]
    if errors:
        lines += ["", f"Errors: `{json.dumps(errors)[:2000]}`"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=HERE / "corpus.jsonl")
    parser.add_argument("--workers", type=int, default=default_workers("math_verify"))
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="REWARD_TIMEOUT_SECONDS (values-reward.yaml)"
    )
    parser.add_argument("--max-inflight", type=int, default=512, help="REWARD_MAX_INFLIGHT (service default)")
    parser.add_argument("--answer", choices=ANSWER_MODES, default=ANSWER_MODES[0])
    parser.add_argument("--peak", type=float, default=0.0, help="/score peak in req/s (0: measure it)")
    parser.add_argument("--load", type=float, default=2.0, help="offered load, times the peak")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--undersized-max-inflight", type=int, default=UNDERSIZED_MAX_INFLIGHT, help="0: skip")
    parser.add_argument("--tag", default=datetime.now(UTC).strftime("%Y%m%dT%H%M"))
    args = parser.parse_args()

    rows = [json.loads(line) for line in args.corpus.read_text().splitlines() if line.strip()]
    config = ServiceConfig(args.workers, args.timeout, args.max_inflight, args.answer)
    print(f"[remote_rm] in-process loop for the expected scores ({args.workers} processes)", flush=True)
    loop = LoopRunner([(r["prompt"], r["response"], r["label"]) for r in rows], args.workers, args.answer)
    expected = loop.expected
    loop.close()
    peak = args.peak
    if peak <= 0:
        print("[remote_rm] /score peak, closed loop (vegeta)", flush=True)
        work = Path(tempfile.mkdtemp(prefix="reward-peak-"))
        try:
            peak = measure_peak(config, rows, work, 12.0)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    report = run(
        rows,
        expected,
        config,
        peak=peak,
        load=args.load,
        seconds=args.seconds,
        concurrency=args.concurrency,
        undersized_max_inflight=args.undersized_max_inflight,
    )
    report["corpus"] = str(args.corpus.resolve().relative_to(ROOT))
    md = write(report, args.tag)
    print(md.read_text())
    return 0 if report["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
