#!/usr/bin/env python3
"""Converts the shared vectors that apply to the C API into lines the C tests read.

    vectors_to_lines.py VECTORS_DIR > vectors.txt

The C test program (tests/c/test_mqstate.c) has no JSON parser; this script reads
VECTORS_DIR/hlc.json and VECTORS_DIR/topics.json and writes one case per line, fields
separated by tabs, every string as the hex of its UTF-8 bytes (so that tabs, newlines, NUL and
non-ASCII characters survive), numbers and stable codes as they are:

    hlc_valid         TEXT MS COUNTER NODE_ID DISPLAY
    hlc_malformed     TEXT REASON
    hlc_order         LOWER HIGHER
    hlc_equal         A B
    hex_encode        BYTES HEX          (HEX as written in the vector: upper-case ASCII)
    hex_decode        TEXT BYTES
    hex_decode_error  TEXT ERROR POSITION  (POSITION empty unless ERROR is invalid_hex_char)
    end               COUNT              (the number of cases above, so truncation is caught)

The HLC clock vectors (merge, send, too_far_ahead) and the topic-name vectors do not apply:
the C API exposes neither the application clock nor topic names.
"""

import json
import sys
from pathlib import Path


def h(text):
    return text.encode("utf-8").hex()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = Path(sys.argv[1])
    hlc = json.loads((root / "hlc.json").read_text(encoding="utf-8"))
    topics = json.loads((root / "topics.json").read_text(encoding="utf-8"))
    lines = []
    for v in hlc["valid"]:
        lines.append(["hlc_valid", h(v["text"]), v["ms"], v["counter"], h(v["node_id"]), h(v["display"])])
    for v in hlc["malformed"]:
        lines.append(["hlc_malformed", h(v["text"]), v["reason"]])
    for v in hlc["ordering"]:
        lines.append(["hlc_order", h(v["lower"]), h(v["higher"])])
    for v in hlc["equal"]:
        lines.append(["hlc_equal", h(v["a"]), h(v["b"])])
    for v in topics["hex_encode"]:
        lines.append(["hex_encode", bytes(v["bytes"]).hex(), v["hex"]])
    for v in topics["hex_decode"]:
        if "error" in v:
            lines.append(["hex_decode_error", h(v["text"]), v["error"], str(v.get("position", ""))])
        else:
            lines.append(["hex_decode", h(v["text"]), bytes(v["bytes"]).hex()])
    out = sys.stdout
    for fields in lines:
        out.write("\t".join(fields) + "\n")
    out.write(f"end\t{len(lines)}\n")


if __name__ == "__main__":
    main()
