"""Install test (scripts/test-install): run by the interpreter of a fresh venv where only the
wheel from dist/ was installed. Sets a key and reads it back.

    python set_get.py mqtt://127.0.0.1:PORT KEY VERSION
"""

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
