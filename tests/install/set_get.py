"""Install test (scripts/test-install): run by the interpreter of a fresh venv where only the
wheel from dist/ was installed. Sets a key and reads it back, and checks that the wheel holds
the clients only: `mqstate.testing` (the in-process test server of a `testing` build) raises
an ImportError that says what to do instead.

    python set_get.py mqtt://127.0.0.1:PORT KEY VERSION
"""

import importlib
import sys

import mqstate


def main() -> int:
    url, key, version = sys.argv[1:4]
    if mqstate.__version__ != version:
        print(f"Python: mqstate.__version__ is {mqstate.__version__}, expected {version}", file=sys.stderr)
        return 1
    expected = b"set from Python"
    with mqstate.Client(url) as client:
        client.set(key, expected)
        got = client.get(key)
    print(f"Python: mqstate {mqstate.__version__} from {mqstate.__file__}: set {key}, got {got!r}")
    if got != expected:
        print(f"Python: expected {expected!r}", file=sys.stderr)
        return 1
    try:
        importlib.import_module("mqstate.testing")
    except ImportError as e:
        if "mqstate serve" not in str(e):
            print(f"Python: mqstate.testing's ImportError does not say what to do: {e}", file=sys.stderr)
            return 1
        print("Python: mqstate.testing is not in the wheel (ImportError naming `mqstate serve`)")
    else:
        print("Python: the wheel has mqstate.testing (the test server): it must hold the clients only", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
