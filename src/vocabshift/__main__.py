"""`python -m vocabshift`: the same as the `vocabshift` command."""

import sys

from .cli import main

sys.exit(main())
