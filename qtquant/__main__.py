import sys

from .cli import main

if __name__ == "__main__":  # a spawned child process imports this module too
    sys.exit(main())
