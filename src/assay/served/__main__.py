"""``python -m assay.served BACKEND ...``: serve a backend (:mod:`assay.served.command`)."""

import sys

from assay.served.command import main

sys.exit(main())
