import sys

from miles_reward.server import main

sys.exit(main())
