import sys

from .attempt.controller import main

sys.exit(main(sys.argv[1:]))
