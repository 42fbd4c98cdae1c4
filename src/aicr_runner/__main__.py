import sys

from aicr_runner.cli import main

sys.exit(main())
