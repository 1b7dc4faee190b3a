#!/usr/bin/env bash
# Splits a file larger than one device call carries (64 MiB with everything else) into parts
# for calls made back to back while the machine stays warm (tools/cuda/gpu_run.sh's `stash`
# stage keeps each call's part in /tmp/parts, `join` rebuilds the file once all are there).
#   tools/cuda/carry_parts.sh FILE PART_MB [PREFIX]   -> PREFIX1/, PREFIX2/, ... (ignored folders;
#   PREFIX defaults to .carry and must start with .carry; two files in flight need two prefixes)
# Each folder holds one part and the manifest (name, parts, sha256 of the whole file).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
file=$1
part_mb=${2:-45}
prefix=${3:-.carry}
[[ "$prefix" == .carry* ]] || { echo "carry_parts: PREFIX must start with .carry" >&2; exit 2; }
name=$(basename "$file")
sum=$(sha256sum "$file" | cut -d' ' -f1)
work=$(mktemp -d)
split -b "${part_mb}M" -d -a 2 "$file" "$work/$name.part"
parts=("$work"/*)
for i in "${!parts[@]}"; do
  d="$root/$prefix$((i + 1))"
  rm -rf "$d" && mkdir -p "$d"
  mv "${parts[$i]}" "$d/"
  printf '%s %s %s\n' "$name" "${#parts[@]}" "$sum" >"$d/manifest"
  grep -qx "/$prefix$((i + 1))/" "$root/.git/info/exclude" 2>/dev/null ||
    echo "/$prefix$((i + 1))/" >>"$root/.git/info/exclude"
done
rmdir "$work"
echo "$name: ${#parts[@]} parts in ${prefix}1 .. $prefix${#parts[@]} (sha256 ${sum:0:16})"
