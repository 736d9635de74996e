"""Entry point: ``miles-reward`` / ``python -m miles_reward``.

Configuration comes from the REWARD_* environment variables (see config.py); the only flag is
``--host`` (default 0.0.0.0), which tests use to bind loopback. SIGTERM stops accepting connections,
lets in-flight requests finish for up to REWARD_TIMEOUT_SECONDS + 5 s, then stops the workers.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import uvicorn

from miles_reward import config as config_mod
from miles_reward.app import RewardApp

EXIT_CONFIG = 2
EXIT_START = 3


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
    server = uvicorn.Server(
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
        )
    )
    server.run()
    if not app.started:
        return EXIT_START
    return 0


if __name__ == "__main__":
    sys.exit(main())
