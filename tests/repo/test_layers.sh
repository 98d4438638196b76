#!/usr/bin/env bash
# Fails when an #include runs against the layering in docs/ARCHITECTURE.md:
#   include/shadowsync (the installed API)   anyone may include it
#   common                                    1
#   shadow, embedding-store                   2
#   rpc                                       3
#   ps, trainer-hooks                         4
#   agent, tools, bench                       5
#   tests                                     6
# A file may include its own folder and folders of a lower layer, never a
# sibling of its own layer or one above it. Inside rpc/, the framework
# (rpc/*.[ch] and its bulk stream, rpc/bulk/) includes no protocol folder
# (rpc/dense, emb, agent, peer, tree, http): the protocols sit on the
# framework, not the other way. A header named *_internal.h is
# private to its folder. The installed headers and the example trainer
# include only the installed API. A bare "x.h" must sit beside its includer.
# And no include circle inside a folder, and no name table looked up by
# hand (below).
set -euo pipefail
cd "$(dirname "$0")/../.."

rank() {
  case "$1" in
    common) echo 1 ;;
    shadow | embedding-store) echo 2 ;;
    rpc) echo 3 ;;
    ps | trainer-hooks) echo 4 ;;
    agent | tools | bench) echo 5 ;;
    tests) echo 6 ;;
    *) echo "" ;;
  esac
}

files=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null ||
  find . -name '*.[ch]' -not -path './build*' | sed 's|^\./||')
bad=0
checked=0
complain() {
  echo "test_layers: $1" >&2
  bad=$((bad + 1))
}
for f in $files; do
  own=${f%%/*}
  dir=$(dirname "$f")
  public_only=false
  case "$f" in
    include/shadowsync/* | examples/c/*) public_only=true ;;
  esac
  own_rank=$(rank "$own")
  if [ -z "$own_rank" ] && [ "$public_only" = false ]; then
    complain "$f: folder '$own' has no layer (add it to tests/repo/test_layers.sh and docs/ARCHITECTURE.md)"
    continue
  fi
  while IFS= read -r inc; do
    [ -n "$inc" ] || continue
    checked=$((checked + 1))
    case "$inc" in
      shadowsync/*) continue ;;
    esac
    if [ "$public_only" = true ]; then
      complain "$f includes \"$inc\": the installed API and its example include only shadowsync/ headers"
      continue
    fi
    if [[ "$inc" != */* ]]; then
      [ -f "$dir/$inc" ] || complain "$f includes \"$inc\", which is not beside it"
      continue
    fi
    target=${inc%%/*}
    target_rank=$(rank "$target")
    if [ -z "$target_rank" ]; then
      complain "$f includes \"$inc\": '$target' is not a layer"
    elif [ "$target" != "$own" ] && [ "$target_rank" -ge "$own_rank" ]; then
      complain "$f ($own, layer $own_rank) includes \"$inc\" ($target, layer $target_rank): includes run downward only"
    elif [ "$target" != "$own" ] && [[ "$inc" == *_internal.h ]]; then
      complain "$f includes \"$inc\": an _internal.h header is private to $target/"
    elif [[ ( ("$f" == rpc/*.[ch] && "$f" != rpc/*/*) || "$f" == rpc/bulk/* ) &&
      "$inc" == rpc/*/* && "$inc" != rpc/bulk/* ]]; then
      complain "$f (the rpc framework) includes \"$inc\": a protocol's folder sits on the framework"
    elif [[ "$inc" == rpc/*/*_internal.h && "$dir" != "$(dirname "$inc")" ]]; then
      complain "$f includes \"$inc\": an _internal.h header is private to $(dirname "$inc")/"
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
# No circles inside a folder: a module is a .c file and its headers (x.c,
# x.h, x_internal.h); module a uses module b when a file of a includes a
# header of b. Two modules that use each other, directly or around a
# longer circle, are one module cut in two (move the function to the side
# that uses it). A header with no .c of its name (a folder's shared
# _internal.h of types) is no module: it cannot close a circle.
circles=$(/usr/bin/python3 - $files <<'PY'
import os, re, sys
files = sys.argv[1:]
def module(path):
    stem = os.path.splitext(path)[0]
    return stem[:-len("_internal")] if stem.endswith("_internal") else stem
implemented = {module(f) for f in files if f.endswith(".c")}
uses = {}
for f in files:
    here = os.path.dirname(f)
    for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', open(f).read(), re.M):
        target = module(inc if "/" in inc else os.path.join(here, inc))
        a = module(f)
        if (target != a and target in implemented and a in implemented and
                os.path.dirname(target) == os.path.dirname(a)):
            uses.setdefault(a, set()).add(target)
found = set()
def walk(start, node, path):
    for nxt in sorted(uses.get(node, ())):
        if nxt == start:
            found.add(" -> ".join(path + [start]))
        elif nxt not in path and nxt > start:  # each circle once, from its least module
            walk(start, nxt, path + [nxt])
for m in sorted(uses):
    walk(m, m, [m])
print("\n".join(sorted(found)))
PY
)
if [ -n "$circles" ]; then
  while IFS= read -r c; do complain "an include circle inside a folder: $c"; done <<<"$circles"
fi
# One name-table lookup (common/names.h ss__name_index): a loop that
# compares a word against a table's entries, strcmp(text, names[i]),
# open-codes it.
while IFS= read -r hit; do
  [ -n "$hit" ] && complain "$hit: a name table looked up by hand (use ss__name_index)"
done < <(grep -nE 'strcmp\([A-Za-z_][A-Za-z0-9_]*, *[A-Za-z_]*names\[[a-z]\]\)' $files /dev/null |
  grep -v '^common/names\.c:' | cut -d: -f1,2)
if [ "$bad" -gt 0 ]; then
  echo "test_layers: $bad place(s) against the layering or the house rules" >&2
  exit 1
fi
echo "test_layers: $checked project includes in $(wc -w <<<"$files") files run downward, no circle"
