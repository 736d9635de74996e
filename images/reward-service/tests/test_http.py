"""The HTTP API of a real service process (two math_verify workers, 2 s timeout) over loopback."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from reward_http import (
    HANGING_RESPONSE,
    MATH_SERVICE_TIMEOUT_SECONDS,
    Service,
    sample,
    wait_until,
)


def test_score_is_a_bare_json_number(math_service: Service) -> None:
    right = math_service.post("/score", sample("so the answer is $\\boxed{34}$", "34"))
    wrong = math_service.post("/score", sample("so the answer is $\\boxed{35}$", "34"))
    assert (right.status, right.body) == (200, b"1.0")
    assert (wrong.status, wrong.body) == (200, b"0.0")
    assert right.headers["content-type"] == "application/json"
    assert isinstance(json.loads(right.body), float)


def test_unusable_label_is_422_with_reason(math_service: Service) -> None:
    for label in (None, "", "{"):
        reply = math_service.post("/score", sample("so $\\boxed{1}$", label))
        assert reply.status == 422, reply.body
        assert reply.json()["error"] == "unusable_label"
        assert reply.json()["detail"]


def test_malformed_requests_are_400(math_service: Service) -> None:
    assert math_service.post("/score", raw=b"{not json").status == 400
    assert math_service.post("/score", {"prompt": "p", "label": "1"}).status == 400
    assert math_service.post("/score", {"response": 3, "label": "1"}).status == 400
    assert math_service.post("/score", {"response": "x", "label": ["1"]}).status == 400
    assert math_service.post("/score", [sample("x", "1")]).status == 400
    assert math_service.post("/score/batch", {"response": "x"}).status == 400


def test_numeric_label_and_missing_prompt_are_accepted(math_service: Service) -> None:
    reply = math_service.post("/score", {"response": "$\\boxed{12}$", "label": 12})
    assert (reply.status, reply.body) == (200, b"1.0")


def test_prompt_as_chat_messages_is_accepted(math_service: Service) -> None:
    """With --apply-chat-template off, miles' remote_rm sends the prompt as the message list."""
    messages = [
        {"role": "system", "content": "Put the answer in \\boxed{}."},
        {"role": "user", "content": "What is 6 x 7?"},
    ]
    reply = math_service.post(
        "/score", {"prompt": messages, "response": "$\\boxed{42}$", "label": "42"}
    )
    assert (reply.status, reply.body) == (200, b"1.0")
    batch = math_service.post(
        "/score/batch", [{"prompt": messages, "response": "7", "label": "42"}]
    )
    assert (batch.status, batch.json()) == (200, [0.0])


def test_malformed_chat_messages_are_400_naming_the_message(math_service: Service) -> None:
    for prompt, needle in (
        ([{"role": "user", "content": "ok"}, {"role": "user"}], "'prompt'[1]"),
        ([{"role": "user", "content": ["part"]}], "'prompt'[0]"),
        (["just text"], "'prompt'[0]"),
        ({"role": "user", "content": "x"}, "found dict"),
    ):
        reply = math_service.post("/score", {"prompt": prompt, "response": "1", "label": "1"})
        assert reply.status == 400, reply.body
        assert needle in reply.json()["detail"], reply.body


def test_methods_and_routes(math_service: Service) -> None:
    assert math_service.get("/score").status == 405
    assert math_service.get("/nope").status == 404
    assert math_service.get("/health").status == 200
    assert math_service.get("/ready").status == 200


def test_batch_keeps_order(math_service: Service) -> None:
    items = [sample(f"so $\\boxed{{{i}}}$", str(i if i % 3 else i + 1)) for i in range(64)]
    reply = math_service.post("/score/batch", items)
    assert reply.status == 200, reply.body
    assert reply.json() == [0.0 if i % 3 == 0 else 1.0 for i in range(64)]
    assert math_service.post("/score/batch", []).json() == []
    wrapped = math_service.post("/score/batch", {"samples": items[:2]})
    assert wrapped.json() == [0.0, 1.0]


def test_batch_with_an_unusable_label_is_422_with_per_sample_results(math_service: Service) -> None:
    items = [sample("$\\boxed{1}$", "1"), sample("$\\boxed{1}$", None), sample("$\\boxed{2}$", "1")]
    reply = math_service.post("/score/batch", items)
    assert reply.status == 422
    body = reply.json()
    assert body["error"] == "unusable_label"
    assert body["results"][0] == 1.0
    assert body["results"][1]["error"] == "unusable_label"
    assert body["results"][2] == 0.0


def test_hanging_check_costs_one_503_within_timeout_and_stalls_nobody(
    math_service: Service,
) -> None:
    restarts_before = math_service.metric("reward_worker_restarts_total", {"reason": "timeout"})
    with ThreadPoolExecutor(max_workers=8) as ex:
        t0 = time.monotonic()

        def timed_hang() -> tuple[Any, float]:
            reply = math_service.post("/score", sample(HANGING_RESPONSE, "3"))
            return reply, time.monotonic() - t0

        hanging = ex.submit(timed_hang)
        # admitted with both workers idle, so it is already with one of them
        wait_until("the hang admitted", lambda: math_service.metric("reward_inflight_samples") == 1)

        def timed(i: int) -> tuple[Any, float]:
            reply = math_service.post("/score", sample(f"$\\boxed{{{i}}}$", str(i)))
            return reply, time.monotonic() - t0

        quick = [ex.submit(timed, i) for i in range(40)]
        quick_replies = [f.result() for f in quick]
        hung, hung_done = hanging.result()
    assert all((r.status, r.body) == (200, b"1.0") for r, _ in quick_replies)
    # the other worker kept answering while the hanging check held its worker (killed at the
    # timeout): a stalled service answers nothing before the hang ends, however fast or busy the
    # machine is
    first_quick = min(done for _, done in quick_replies)
    assert first_quick < hung_done, (
        f"other requests stalled behind the hang: first answer at {first_quick:.2f}s"
    )
    assert hung.status == 503
    assert hung.json()["error"] == "timeout"
    assert hung.headers.get("retry-after") == "1"
    timeout = MATH_SERVICE_TIMEOUT_SECONDS
    assert timeout <= hung_done < timeout + 1.5, hung_done
    after = math_service.metric("reward_worker_restarts_total", {"reason": "timeout"})
    assert after == restarts_before + 1
    # the killed worker was replaced: both workers serve again
    wait_until("both workers ready", lambda: math_service.metric("reward_workers_ready") == 2)
    assert math_service.post("/score", sample("$\\boxed{5}$", "5")).body == b"1.0"


def test_hang_inside_a_batch_fails_only_that_sample(math_service: Service) -> None:
    items = [sample(f"$\\boxed{{{i}}}$", str(i)) for i in range(20)]
    items[7] = sample(HANGING_RESPONSE, "3")
    t0 = time.monotonic()
    reply = math_service.post("/score/batch", items)
    took = time.monotonic() - t0
    assert reply.status == 503
    results = reply.json()["results"]
    assert results[7]["error"] == "timeout"
    assert [r for i, r in enumerate(results) if i != 7] == [1.0] * 19
    assert took < MATH_SERVICE_TIMEOUT_SECONDS + 2.0, f"{took:.2f}s"


def test_huge_response_is_answered(math_service: Service) -> None:
    huge = "Let us expand the sum term by term. " * 30000 + "Thus $\\boxed{42}$."
    t0 = time.monotonic()
    reply = math_service.post("/score", sample(huge, "42"), timeout=30)
    took = time.monotonic() - t0
    # Either verified in time or a timeout 503 within the limit: never a silent 0.0 for a failure.
    assert reply.status in (200, 503), reply.body
    if reply.status == 200:
        assert reply.body == b"1.0"
    else:
        assert reply.json()["error"] == "timeout"
    assert took < MATH_SERVICE_TIMEOUT_SECONDS + 0.5, f"{took:.2f}s"


def test_metrics_exposition(math_service: Service) -> None:
    math_service.post("/score", sample("$\\boxed{1}$", "1"))
    text = math_service.get("/metrics").body.decode()
    assert "# TYPE reward_requests_total counter" in text
    assert "# TYPE reward_request_duration_seconds histogram" in text
    assert 'reward_request_duration_seconds_bucket{endpoint="score",le="+Inf"}' in text
    assert "# TYPE reward_inflight_samples gauge" in text
    assert math_service.metric("reward_requests_total", {"endpoint": "score", "outcome": "ok"}) >= 1
    assert math_service.metric("reward_inflight_samples") == 0
    assert math_service.metric("reward_max_inflight_samples") == 256


def test_large_and_small_samples_keep_their_own_scores(math_service: Service) -> None:
    """Samples over the inline-send size go to workers from a thread; a small sample sent right
    after must not overtake it in the pipe (each score must belong to its own sample)."""
    filler = "We expand every term carefully and simplify the sum. " * 4000  # ~200 KB
    items = []
    expected = []
    for i in range(24):
        if i % 3 == 0:
            items.append(sample(filler + f"Thus $\\boxed{{{i}}}$.", str(i)))
            expected.append(1.0)
        else:
            items.append(sample(f"Thus $\\boxed{{{i}}}$.", str(i + 1)))
            expected.append(0.0)
    for _ in range(3):
        reply = math_service.post("/score/batch", items, timeout=60)
        assert reply.status == 200, reply.body[:300]
        assert reply.json() == expected


def test_score_sums_give_the_mean_reward_of_what_was_scored(math_service: Service) -> None:
    """The dashboard's mean reward is (positive - negative) / scored samples: each scored sample's
    score is added once, failed samples of a partial batch add nothing."""

    def totals() -> tuple[float, float, float]:
        return (
            math_service.metric("reward_score_total", {"sign": "positive"}),
            math_service.metric("reward_score_total", {"sign": "negative"}),
            math_service.metric("reward_samples_total", {"outcome": "scored"}),
        )

    before = totals()
    right = [sample(f"$\\boxed{{{i}}}$", str(i)) for i in range(3)]
    wrong = [sample("$\\boxed{1}$", "2"), sample("$\\boxed{7}$", "8")]
    assert math_service.post("/score/batch", right + wrong).json() == [1.0] * 3 + [0.0] * 2
    unusable = math_service.post("/score/batch", [right[0], sample("$\\boxed{1}$", "{")])
    assert unusable.status == 422, unusable.body
    after = totals()
    positive, negative, scored = (a - b for a, b in zip(after, before, strict=True))
    assert (positive, negative, scored) == (4.0, 0.0, 6.0)
