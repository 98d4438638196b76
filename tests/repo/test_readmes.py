#!/usr/bin/env python3
"""Every folder's README is true: each source file in the folder is named
in it (by its name, or its stem as `x`, `x.h`, `x.[ch]`), and each file it
names in backticks exists (relative to the folder, to the repository, or
as a file of that name somewhere in the repository). Generated files
(`*.pb-c.*`, build outputs) are not looked for.

    python3 tests/repo/test_readmes.py [REPO]
"""
import os
import re
import subprocess
import sys

SOURCE = re.compile(r"\.(c|h|cu|sh|py|proto|md)$")
NAMED = re.compile(r"`([A-Za-z0-9_./\-\[\]*]+\.(?:c|h|cu|sh|py|proto|md|tsv|txt|png|\[ch\]))`")
NOT_LISTED = {"README.md", "CHANGELOG.md", "CMakeLists.txt"}
OUTSIDE = {"train.txt"}  # files of others a README talks about (Criteo's)


def tracked(repo):
    out = subprocess.run(["git", "-C", repo, "ls-files"], capture_output=True, text=True)
    if out.returncode != 0:  # not a checkout (an unpacked tarball): walk the tree
        files = []
        for root, dirs, names in os.walk(repo):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
            files += [os.path.relpath(os.path.join(root, n), repo) for n in names]
        return files
    return out.stdout.split()


def is_named(name, text):
    stem = name.rsplit(".", 1)[0]
    return any(
        k in text
        for k in (name, f"`{stem}`", f"{stem}.h", f"{stem}.[ch]", f"{stem}.c", f"{stem}.cu")
    )


def expand(token):
    if token.endswith(".[ch]"):
        return [token[:-5] + ".c", token[:-5] + ".h"]
    return [token]


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = tracked(repo)
    basenames = {os.path.basename(f) for f in files}
    folders = sorted({os.path.dirname(f) for f in files if os.path.basename(f) == "README.md"})
    problems = []
    for folder in folders:
        readme = os.path.join(repo, folder, "README.md")
        text = open(readme, encoding="utf-8").read()
        here = sorted(
            os.path.basename(f)
            for f in files
            if os.path.dirname(f) == folder and SOURCE.search(f) and os.path.basename(f) not in NOT_LISTED
        )
        if folder == "":  # the top-level README names the folders, not its files
            here = []
        for name in here:
            if not is_named(name, text):
                problems.append(f"{folder or '.'}/README.md does not name {name}")
        for token in NAMED.findall(text):
            if "*" in token or ".pb-c." in token or token.startswith(("out/", "_")) or token in OUTSIDE:
                continue
            for path in expand(token):
                candidates = [os.path.join(repo, folder, path), os.path.join(repo, path)]
                if not any(os.path.exists(c) for c in candidates) and os.path.basename(path) not in basenames:
                    problems.append(f"{folder or '.'}/README.md names {path}, which does not exist")
    for p in problems:
        print("FAIL:", p)
    print(f"{len(folders)} READMEs checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
