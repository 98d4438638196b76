#!/ usr / bin / env python3
"""The library's one internal error rule (common/strbuf.h): every internal
constructor, a function named ss__*_create, ss__*_start or ss__*_open (or
one of their variants, as ss__replica_create_device) that returns an
ss_status, takes (char *why, size_t whylen) as its last two arguments.
Fails naming each declaration that does not.

Usage: test_error_rule.py [SOURCE_ROOT]"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
SKIP_DIRS = {"build", "Testing", ".git", "tests", "python"}
DECL = re.compile(r"^ss_status\s+(ss__\w+?_(?:create|start|open)\w*)\s*\(([^;{]*?)\)\s*;", re.M | re.S)
LAST_TWO = re.compile(r"char\s*\*\s*why\s*,\s*size_t\s+whylen$")


def headers(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
        for f in files:
            if f.endswith(".h"):
                yield os.path.join(d, f)


def main():
    bad, seen = [], 0
    for h in sorted(headers(ROOT)):
        text = open(h, encoding="utf-8").read()
        for m in DECL.finditer(text):
            seen += 1
            args = " ".join(m.group(2).split())
            if not LAST_TWO.search(args):
                line = text.count("\n", 0, m.start()) + 1
                bad.append("%s:%d: %s(...) takes no (char *why, size_t whylen) last"
                           % (os.path.relpath(h, ROOT), line, m.group(1)))
    for b in bad:
        print(b)
    print("%d internal constructors, %d without the error out-parameter" % (seen, len(bad)))
    if seen == 0:
        print("no constructor found: is %s the source root?" % ROOT)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
