"""`python -m cairn.bench`: the same as `cairn bench`."""

import sys

from cairn.bench import main

sys.exit(main())
