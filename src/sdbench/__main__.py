"""``python -m sdbench`` and the ``sdbench`` command (:func:`entry`)."""
import sys


def entry() -> None:
    """Run the command line.  A Ctrl-C while its modules load is an interruption like any later one (one line,
    exit 130), not a traceback."""
    try:
        from .cli import main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    sys.exit(main())


if __name__ == "__main__":
    entry()
