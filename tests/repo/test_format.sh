#!/usr/bin/env bash
# Fails when a tracked C or CUDA file differs from .clang-format's layout.
set -euo pipefail
cd "$(dirname "$0")/../.."
files=$(git ls-files '*.c' '*.h' '*.cu' 2>/dev/null || find . \( -name '*.[ch]' -o -name '*.cu' \) -not -path './build*')
clang-format --dry-run --Werror $files
echo "test_format: $(wc -w <<<"$files") files formatted"
