"""Entry point: ``miles-reward`` / ``python -m miles_reward``.

Configuration comes from the REWARD_* environment variables (see config.py); the only flag is
``--host`` (default 0.0.0.0), which tests use to bind loopback. SIGTERM stops accepting connections
and lets in-flight requests finish: samples still queued after REWARD_TIMEOUT_SECONDS are answered
503, checks already running finish or time out, then the workers stop (at most
2 x REWARD_TIMEOUT_SECONDS + 2 s in all).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from types import FrameType

import uvicorn

from miles_reward import config as config_mod
from miles_reward.app import RewardApp

EXIT_CONFIG = 2
EXIT_START = 3


class _Server(uvicorn.Server):
    """uvicorn's server, telling the app when SIGTERM/SIGINT arrives so it can bound the drain."""

    def __init__(self, config: uvicorn.Config, app: RewardApp) -> None:
        super().__init__(config)
        self.reward_app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.reward_app.begin_shutdown()
        super().handle_exit(sig, frame)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="miles-reward", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    args = parser.parse_args(argv)
    try:
        cfg = config_mod.load()
    except config_mod.ConfigError as exc:
        print(f"miles-reward: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=cfg.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    app = RewardApp(cfg)
    server = _Server(
        uvicorn.Config(
            app,
            host=args.host,
            port=cfg.port,
            loop="uvloop",
            http="httptools",
            lifespan="on",
            access_log=False,
            log_level=cfg.log_level,
            # Longer than any client pool's idle expiry, so the server never closes a connection
            # that a client is about to reuse (miles' client does not retry).
            timeout_keep_alive=120,
            timeout_graceful_shutdown=int(cfg.shutdown_grace_seconds + 0.999),
            backlog=4096,
        ),
        app,
    )
    server.run()
    if not app.started:
        return EXIT_START
    return 0


if __name__ == "__main__":
    sys.exit(main())
