import sys

from mlx_sdm.cli import main

sys.exit(main())
