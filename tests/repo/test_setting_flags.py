#!/usr/bin/env python3
"""One declaration per setting: a program's flag named after a key of the
library's key tables (trainer-hooks/settings.c: alpha, rpc-timeout-ms,
emb-lr, ...) must be the flag the library builds from that key
(ss__setting_flags_add, marked "(library setting)" in --help), not one
declared by hand with its own default, range and help.

    python3 tests/repo/test_setting_flags.py SOURCE_DIR BIN_DIR

Programs checked: those that configure a trainer's sync and tables
(ctr-train; shadowsync-agent, which runs its trainers' sync). Not meant to: shadowsync-ps (its --tls-* are the
server's identity), shadowsync-sim and the benchmarks (their --ps is a
count or a bench target)."""
import re
import subprocess
import sys

CHECKED = ["ctr-train", "shadowsync-agent"]
MARK = "(library setting)"


def library_keys(source_dir):
    text = open(f"{source_dir}/trainer-hooks/settings.c", encoding="utf-8").read()
    return [k.replace("_", "-") for k in re.findall(r'^\s*[TB]K\("([a-z_]+)"', text, re.M)]


def flag_help(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=20).stdout
    return dict(re.findall(r"^  --([a-z0-9-]+)\s+\w+\s+(.*)$", out, re.M))


def main():
    source_dir, bin_dir = sys.argv[1], sys.argv[2]
    keys = library_keys(source_dir)
    if len(keys) < 30:
        print(f"FAIL: only {len(keys)} keys read from trainer-hooks/settings.c")
        return 1
    problems, seen = [], 0
    for prog in CHECKED:
        flags = flag_help(f"{bin_dir}/{prog}")
        for key in keys:
            if key not in flags:
                continue
            seen += 1
            if MARK not in flags[key]:
                problems.append(f"{prog} --{key}: declared by hand; take it from the key table")
    for p in problems:
        print("FAIL:", p)
    print(f"{len(CHECKED)} programs, {seen} flags of library keys, {len(problems)} declared by hand")
    return 1 if problems or seen == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
