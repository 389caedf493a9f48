"""Allow `python -m wakeline`."""

from wakeline.cli import main

if __name__ == "__main__":
    main()
