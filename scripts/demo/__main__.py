"""`python -m cairn.demo`: the same as `cairn demo`."""

import sys

from cairn.demo import main

sys.exit(main())
