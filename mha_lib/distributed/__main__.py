"""`python -m mha_lib.distributed JOB`: see `mha_lib.distributed.command`."""

import sys

from .command import main

sys.exit(main())
