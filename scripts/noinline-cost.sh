#!/bin/bash
# noinline-cost.sh: what each //go:noinline of the product saves. For every directive, it
# builds the .wasm without that one directive and prints the bytes V8 compiles at configure
# and on the first request (scripts/v8-compile-phases.sh) and the .wasm's size, after the
# same figures for the tree as it is. A directive stays where its removal adds 0.5% or more to
# either step (filter/doc.go). Needs node and wabt's wasm-objdump; edits the working tree
# one file at a time and restores each with git checkout, so run it on a clean tree.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=-trimpath GOOS=wasip1 GOARCH=wasm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "$(git status --porcelain -- '*.go')" ]; then
  echo "noinline-cost.sh: commit or set aside the .go changes first" >&2
  exit 2
fi
phases() { # MODULE: "configure request0 size"
  sh scripts/v8-compile-phases.sh "$1" | awk '/^(configure|request0) /{printf "%s ", $4}'
  stat -c %s "$1"
}
go build -buildmode=c-shared -o "$tmp/base.wasm" .
echo "as it is: $(phases "$tmp/base.wasm")"
git grep -n '^//go:noinline$' -- '*.go' ':!*_test.go' | while IFS=: read -r file line _; do
  fn=$(sed -n "$((line + 1))p" "$file" | sed -E 's/ *\{.*//')
  sed -i "${line}d" "$file"
  if go build -buildmode=c-shared -o "$tmp/one.wasm" . 2>/dev/null; then
    echo "$file:$line $fn: $(phases "$tmp/one.wasm")"
  else
    echo "$file:$line $fn: does not build without it"
  fi
  git checkout -q -- "$file"
done
